"""horovod.runner.run(): results in rank order, remote exceptions re-raised with rank and traceback."""

import os
import sys

import pytest

import horovod.runner
from horovod.runner.errors import BadInputError
from horovod.runner.run_api import RemoteTraceback

from launch_harness import base_env


@pytest.fixture(autouse=True)
def _clean_launch_environment(monkeypatch):
    for name, value in base_env().items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):
        if name.startswith(("HVDRUN_SSH", "HOROVOD_")):
            monkeypatch.delenv(name)


def rank_times(factor, offset=0):
    return int(os.environ["HOROVOD_RANK"]) * factor + offset


def test_results_come_back_in_rank_order():
    assert horovod.runner.run(rank_times, args=(10,), kwargs={"offset": 1}, num_proc=3) == [1, 11, 21]


def test_closures_and_lambdas_are_shipped_by_value():
    base = {"x": 5}
    assert horovod.runner.run(lambda: base["x"] + int(os.environ["HOROVOD_SIZE"]), num_proc=2) == [7, 7]


def test_workers_see_the_worker_environment():
    def ids():
        return tuple(os.environ[f"HOROVOD_{n}"] for n in ("RANK", "SIZE", "LOCAL_RANK", "HOSTNAME"))
    assert horovod.runner.run(ids, hosts="localhost:2") == [("0", "2", "0", "localhost"),
                                                           ("1", "2", "1", "localhost")]


class CustomError(Exception):
    pass


def fail_on_rank_one():
    if os.environ["HOROVOD_RANK"] == "1":
        raise CustomError("bad shard")
    return "fine"


def test_exception_is_reraised_with_rank_and_remote_traceback():
    with pytest.raises(CustomError, match="bad shard") as info:
        horovod.runner.run(fail_on_rank_one, num_proc=2)
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "Traceback on rank 1" in str(cause)
    assert "fail_on_rank_one" in str(cause)
    if sys.version_info >= (3, 11):
        assert "(raised on rank 1 of horovod.run())" in info.value.__notes__


def exit_hard():
    if os.environ["HOROVOD_RANK"] == "0":
        os._exit(9)
    import time
    time.sleep(60)
    return "never"


def test_rank_dying_without_a_result_raises_runtime_error():
    with pytest.raises(RuntimeError, match="rank 0 exited with code 9 before returning a result"):
        horovod.runner.run(exit_hard, num_proc=2)


def unpicklable_result():
    import threading
    return threading.Lock()


def test_unpicklable_result_is_reported():
    with pytest.raises(RuntimeError, match="could not be pickled"):
        horovod.runner.run(unpicklable_result, num_proc=1)


def test_bad_arguments_fail_before_starting(monkeypatch):
    # As if hvd-elastic were not installed.
    monkeypatch.setitem(sys.modules, "horovod.runner.elastic", None)
    monkeypatch.delattr(horovod.runner, "elastic", raising=False)
    with pytest.raises(BadInputError):
        horovod.runner.run(rank_times, args=(1,), num_proc=3, hosts="localhost:2")
    with pytest.raises(BadInputError, match="mutually exclusive"):
        horovod.runner.run(rank_times, args=(1,), num_proc=1, use_gloo=True, use_mpi=True)
    with pytest.raises(BadInputError, match="hvd-elastic"):
        horovod.runner.run(rank_times, args=(1,), num_proc=1, min_num_proc=1)
    with pytest.raises(BadInputError, match="hvd-elastic"):
        horovod.runner.run(rank_times, args=(1,), min_np=1, max_np=2)


def test_np_is_accepted_and_defaults_to_one():
    assert horovod.runner.run(rank_times, args=(1,)) == [0]
    assert horovod.runner.run(rank_times, args=(1,), np=2) == [0, 1]


def test_horovod_run_is_horovod_runner_run_and_returns_results_in_rank_order():
    import horovod
    if not hasattr(horovod, "__file__") or horovod.__file__ is None:
        pytest.skip("hvd-core's horovod/__init__.py (which exposes horovod.run) is not present")
    assert horovod.run(rank_times, args=(2,), num_proc=2) == [0, 2]


def test_run_writes_rank_output_files_and_prefixes_console_lines(tmp_path, capfd):
    def talk():
        print("hello from", os.environ["HOROVOD_RANK"])
        return None
    assert horovod.runner.run(talk, num_proc=2, output_filename=str(tmp_path)) == [None, None]
    assert (tmp_path / "rank.1" / "stdout").read_text() == "hello from 1\n"
    assert "[0]<stdout>:hello from 0" in capfd.readouterr().out


@pytest.mark.mpi
def test_run_with_mpi_starts_the_ranks_under_mpirun(mpi_bin, monkeypatch):
    monkeypatch.setenv("PATH", mpi_bin + os.pathsep + os.environ["PATH"])

    def mpi_rank():
        return int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"])
    assert horovod.runner.run(mpi_rank, num_proc=2, use_mpi=True) == [0, 1]


@pytest.mark.ssh
def test_run_over_ssh_returns_each_hosts_result_in_rank_order(sshd, monkeypatch):
    monkeypatch.setenv("HVDRUN_SSH_OPTIONS", sshd.ssh_options)
    assert horovod.runner.run(
        lambda: os.environ["HOROVOD_HOSTNAME"], hosts="localhost:1,127.0.0.2:1",
        ssh_port=sshd.port, ssh_identity_file=sshd.identity_file) == ["localhost", "127.0.0.2"]


def test_check_build_reports_what_is_installed(capsys):
    text = horovod.runner.check_build()
    assert "Available Frameworks:" in text and "Available Controllers:" in text
    assert "Available Tensor Operations:" in text
    assert "[X] Gloo" in text
    assert capsys.readouterr().out == text


def test_check_build_flag_lists_gloo_and_the_frameworks():
    from launch_harness import horovodrun
    result = horovodrun("--check-build")
    assert result.returncode == 0
    assert "[X] Gloo" in result.stdout and "PyTorch" in result.stdout


def test_network_interface_address_is_used_and_reachable():
    from horovod.runner.network import interface_ipv4_address, list_interfaces
    candidates = [(name, interface_ipv4_address(name)) for name in list_interfaces() if name != "lo"]
    candidates = [(name, address) for name, address in candidates if address]
    if not candidates:
        pytest.skip("no network interface besides loopback has an IPv4 address")
    name, address = candidates[0]
    # The workers fetch the function from the store at this address, so
    # getting a result back proves they could reach it.
    assert horovod.runner.run(lambda: (os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                                       os.environ["HOROVOD_GLOO_IFACE"]),
                              num_proc=1, network_interfaces=name) == [(address, name)]
