# test_compatibility_paths.py - Horovod's launcher module paths that its test
# utilities and integrations import (horovod.runner.util.threads,
# horovod.runner.common.util.*, horovod.runner.mpi_run) behave as there.
import os
import sys
import threading
import time

import pytest

from horovod.runner.common.util import codec, env, hosts, secret, timeout
from horovod.runner.mpi_run import is_mpich, is_open_mpi, mpi_available
from horovod.runner.util.threads import execute_function_multithreaded, in_thread, on_event


def test_in_thread_runs_the_target_and_can_swallow_its_errors():
    seen = []
    thread = in_thread(seen.append, args=(1,))
    thread.join(5)
    assert seen == [1] and thread.daemon

    def boom():
        raise RuntimeError("ignored")

    in_thread(boom, silent=True).join(5)
    with pytest.raises(ValueError, match="tuple"):
        in_thread(seen.append, args=1)


def test_on_event_calls_once_set_and_stops_without_calling():
    event, calls = threading.Event(), []
    thread = on_event(event, calls.append, args=("fired",))
    time.sleep(0.1)
    assert calls == []
    event.set()
    thread.join(5)
    assert calls == ["fired"]

    event, stop = threading.Event(), threading.Event()
    thread = on_event(event, calls.append, args=("never",), stop=stop, check_stop_interval_s=0.05, daemon=False)
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and calls == ["fired"]
    with pytest.raises(ValueError):
        on_event(threading.Event(), calls.append, daemon=False)
    with pytest.raises(ValueError):
        on_event(None, calls.append)


def test_execute_function_multithreaded_returns_results_by_index():
    assert execute_function_multithreaded(lambda a, b: a * b, [(1, 2), (3, 4), (5, 6)],
                                          max_concurrent_executions=2) == {0: 2, 1: 12, 2: 30}


@pytest.mark.parametrize("variables, expected", [
    ({}, (0, 1)),
    ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4"}, (3, 4)),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, (1, 2)),
    ({"PMI_RANK": "5", "PMI_SIZE": "8"}, (5, 8)),
])
def test_get_env_rank_and_size_reads_each_launcher(monkeypatch, variables, expected):
    for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                 "PMI_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert env.get_env_rank_and_size() == expected


def test_get_env_rank_and_size_rejects_half_a_pair(monkeypatch):
    monkeypatch.setenv("HOROVOD_RANK", "0")
    monkeypatch.delenv("HOROVOD_SIZE", raising=False)
    with pytest.raises(RuntimeError, match="HOROVOD_SIZE"):
        env.get_env_rank_and_size()


def test_secret_digests_and_codec_round_trip():
    key = secret.make_secret_key()
    assert len(key) == secret.SECRET_LENGTH and key != secret.make_secret_key()
    digest = secret.compute_digest(key, b"message")
    assert len(digest) == secret.DIGEST_LENGTH
    assert secret.check_digest(key, b"message", digest)
    assert not secret.check_digest(key, b"other", digest)
    # The variable Horovod's helpers use to hand the secret to workers is the one hvd's engine reads.
    assert secret.HOROVOD_SECRET_KEY == "HOROVOD_SECRET_KEY"
    assert not env.is_exportable(secret.HOROVOD_SECRET_KEY) and env.is_exportable("NCCL_DEBUG")
    value = {"fn": len, "data": [1, 2]}
    assert codec.loads_base64(codec.dumps_base64(value)) == value
    assert isinstance(codec.dumps_base64(1), str) and isinstance(codec.dumps_base64(1, to_ascii=False), bytes)


def test_timeout_raises_after_its_deadline():
    t = timeout.Timeout(0.05, message="waited {timeout} s")
    t.check_time_out_for("nothing")  # not yet
    time.sleep(0.1)
    assert t.timed_out() and t.remaining() == 0
    with pytest.raises(timeout.TimeoutException, match="Timed out waiting for workers. waited 0.05 s"):
        t.check_time_out_for("workers")


def test_host_helpers_parse_and_assign_as_horovod(tmp_path):
    parsed = hosts.parse_hosts("a:2,b:1")
    assert [(h.hostname, h.slots) for h in parsed] == [("a", 2), ("b", 1)]
    assert hosts.HostInfo.from_string("c:4").slots == 4
    assert hosts.parse_hosts_and_slots("a:2,b:1") == (["a", "b"], {"a": 2, "b": 1})
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb slots=1\n")
    assert hosts.parse_host_files(str(hostfile)) == "a:2,b:1"
    slots = hosts.get_host_assignments(parsed, min_num_proc=1)
    assert [(s.hostname, s.rank, s.local_rank, s.cross_rank) for s in slots] == [
        ("a", 0, 0, 0), ("a", 1, 1, 0), ("b", 2, 0, 1)]
    assert slots[2].to_response_string() == "2,3,0,1,1,2"
    assert len(hosts.get_host_assignments(parsed, 1, max_num_proc=2)) == 2
    with pytest.raises(ValueError, match="slots"):
        hosts.get_host_assignments(parsed, min_num_proc=4)


def test_mpi_run_queries_answer_false_without_mpirun(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert not mpi_available() and not is_open_mpi() and not is_mpich()


def test_mpi_run_queries_name_the_mpirun_on_path(monkeypatch, mpi_bin, request):
    flavour = request.node.callspec.params["mpi_bin"]
    monkeypatch.setenv("PATH", mpi_bin + os.pathsep + "/usr/bin:/bin")
    assert mpi_available()
    assert is_open_mpi() == (flavour == "openmpi") and is_mpich() == (flavour == "mpich")


def test_horovod_args_and_private_run_launch_a_function_and_a_command(tmp_path):
    from horovod.runner import _HorovodArgs
    from horovod.runner.launch import _run
    args = _HorovodArgs()
    assert args.num_proc == 1 and args.run_func is None and args.fusion_threshold_mb is None
    args.num_proc = 2
    args.run_func = _rank_and_size
    assert _run(args) == [(0, 2), (1, 2)]

    args = _HorovodArgs()
    args.num_proc = 2
    marker = tmp_path / "ran"
    args.command = [sys.executable, "-c", "open(%r + __import__('os').environ['HOROVOD_RANK'], 'w')" % str(marker)]
    assert _run(args) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ran0", "ran1"]
    args.command = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(RuntimeError, match="exit status 3"):
        _run(args)


def _rank_and_size():
    from horovod.runner.common.util.env import get_env_rank_and_size
    return get_env_rank_and_size()


def test_parse_args_reads_the_command_line(monkeypatch):
    from horovod.runner.launch import parse_args
    monkeypatch.setattr(sys, "argv", ["horovodrun", "-np", "3", "--no-autotune", "python", "x.py"])
    args = parse_args()
    assert args.num_proc == 3 and args.autotune is False and args.command == ["python", "x.py"]


def test_config_parser_applies_a_config_and_sets_the_environment():
    import argparse
    from horovod.runner.common.util import config_parser
    args = argparse.Namespace(cycle_time_ms=None, fusion_threshold_mb=4.0)
    config_parser.set_args_from_config(args, {"params": {"cycle_time_ms": 2, "fusion_threshold_mb": 8}},
                                       override_args={"fusion_threshold_mb"})
    assert args.cycle_time_ms == 2.0 and args.fusion_threshold_mb == 4.0
    env = config_parser.set_env_from_args({}, args)
    assert env == {"HOROVOD_CYCLE_TIME": "2.0", "HOROVOD_FUSION_THRESHOLD": str(4 * 1024 * 1024)}


def test_safe_shell_exec_forwards_prefixed_output_and_stops_on_an_event():
    import io
    from horovod.runner.common.util import safe_shell_exec
    out, err = io.StringIO(), io.StringIO()
    code = safe_shell_exec.execute("echo one; echo two >&2; exit 4", stdout=out, stderr=err, index=7)
    assert code == 4 and out.getvalue() == "[7]<stdout>:one\n" and err.getvalue() == "[7]<stderr>:two\n"
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    start = time.monotonic()
    code = safe_shell_exec.execute("sleep 30 & sleep 30", events=[stop], stdout=io.StringIO())
    assert code != 0 and time.monotonic() - start < 10


def test_ssh_check_reports_unreachable_hosts(capsys):
    from horovod.runner.launch import _check_all_hosts_ssh_successful
    assert _check_all_hosts_ssh_successful(["no-such-host.invalid"]) is False
    assert "no-such-host.invalid" in capsys.readouterr().out


def test_run_controller_calls_the_chosen_launcher():
    from horovod.runner.launch import run_controller
    called = []
    run_controller(False, lambda: called.append("gloo"), True, lambda: called.append("mpi"), False, None, 0)
    run_controller(False, lambda: called.append("gloo"), False, lambda: called.append("mpi"), False, None, 0)
    assert called == ["mpi", "gloo"]
    with pytest.raises(ValueError, match="jsrun"):
        run_controller(False, None, False, None, True, None, 0)
