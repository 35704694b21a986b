"""Every kind of bad input gets a clear error within seconds, and starts nothing."""

import os
import time

import pytest

from launch_harness import base_env, free_port, horovodrun


def _fails_fast(*args, code, match, env=None, within=15):
    start = time.monotonic()
    result = horovodrun(*args, env=env)
    elapsed = time.monotonic() - start
    assert result.returncode == code, (result.returncode, result.stderr)
    assert match in result.stderr, result.stderr
    assert result.stdout == ""
    assert elapsed < within
    return result


@pytest.mark.parametrize("hosts,match", [
    ("a:2,,b:2", "has an empty entry"),
    ("a:two", "slot count 'two' is not a positive integer"),
    ("a:0", "slot count '0'"),
    ("a b", "entry 'a b' is malformed"),
    ("a:1,a:1", "listed twice"),
])
def test_malformed_hosts_are_refused_naming_the_problem(hosts, match):
    _fails_fast("-np", 1, "-H", hosts, "true", code=2, match=match)


def test_malformed_hostfile_names_file_and_line(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("good slots=1\nbad slots=many\n")
    _fails_fast("-hostfile", path, "true", code=2, match=f"host file {path}:2")


def test_missing_hostfile_is_refused(tmp_path):
    _fails_fast("-hostfile", tmp_path / "nope", "true", code=2, match="cannot read host file")


def test_np_larger_than_the_slots_is_refused():
    _fails_fast("-np", 5, "-H", "localhost:2,127.0.0.2:2", "true", code=2,
                match="-np 5 is larger than the 4 slot(s) available on localhost:2,127.0.0.2:2")


def test_missing_command_is_refused():
    _fails_fast("-np", 2, code=2, match="no command given")


def test_missing_np_without_hosts():
    _fails_fast("true", code=2, match="-np/--num-proc is required")


def test_gloo_and_mpi_are_mutually_exclusive():
    _fails_fast("--gloo", "--mpi", "-np", 1, "true", code=2, match="not allowed with argument")


def test_gloo_and_mpi_from_environment_are_mutually_exclusive():
    _fails_fast("-np", 1, "true", code=2, match="--gloo and --mpi are mutually exclusive",
                env=base_env(HVDRUN_GLOO="1", HVDRUN_MPI="1"))


def test_hosts_and_hostfile_are_mutually_exclusive(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("localhost slots=1\n")
    _fails_fast("-H", "localhost:1", "-hostfile", path, "true", code=2, match="mutually exclusive")


def test_non_integer_np_is_refused():
    _fails_fast("-np", "two", "true", code=2, match="invalid int value")


def test_unknown_network_interface_is_refused():
    _fails_fast("-np", 1, "--network-interfaces", "nosuchif0", "true", code=2,
                match="no interface named nosuchif0")


def test_unknown_config_file_key_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("params:\n  fusion: 3\n")
    _fails_fast("-np", 1, "--config-file", path, "true", code=2, match="params.fusion is not a known key")


def test_missing_identity_file_is_refused(tmp_path):
    _fails_fast("-np", 1, "-i", tmp_path / "key", "true", code=2, match="does not exist")


@pytest.mark.parametrize("flag", [["--min-np", "1"],
                                  ["--host-discovery-script", "discover.sh"]])
def test_elastic_flags_ask_for_hvd_elastic(flag, tmp_path):
    # hvd-elastic may be installed here: a sitecustomize hides it from horovodrun.
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['horovod.runner.elastic'] = None\n")
    env = base_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    _fails_fast(*flag, "-np", 1, "true", code=2, match="pip install hvd-elastic", env=env)


def test_mpi_without_mpirun_on_path_fails_naming_it(tmp_path):
    env = base_env(PATH=str(tmp_path))  # an empty directory: no mpirun
    _fails_fast("--mpi", "-np", 1, "true", code=1, match="--mpi needs mpirun, but it is not on PATH",
                env=env)


def test_mpirun_that_is_neither_flavour_is_refused(tmp_path):
    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\necho 'Some Other MPI 1.0'\n")
    fake.chmod(0o755)
    env = base_env(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    _fails_fast("--mpi", "-np", 1, "true", code=1, match="is neither Open MPI nor MPICH", env=env)


def test_host_refusing_ssh_connections_fails_naming_host_and_port():
    port = free_port()  # nothing listens there
    _fails_fast("-np", 1, "-H", "127.0.0.2:1", "-p", port, "true", code=1,
                match=f"cannot ssh to host '127.0.0.2' port {port}")


def test_unresolvable_host_fails_naming_it():
    _fails_fast("-np", 1, "-H", "no-such-host.invalid:1", "true", code=1,
                match="cannot resolve host 'no-such-host.invalid'")


def test_unanswering_host_times_out_within_start_timeout():
    # 192.0.2.0/24 is TEST-NET-1: routable in principle, never answers.
    _fails_fast("-np", 1, "-H", "192.0.2.1:1", "--start-timeout", "2", "true", code=1,
                match="192.0.2.1", within=20)


@pytest.mark.ssh
def test_rejected_ssh_key_fails_naming_the_host(sshd):
    _fails_fast("-np", 1, "-H", "127.0.0.2:1", "-p", sshd.port, "-i", sshd.wrong_identity_file,
                "true", code=1, match="cannot ssh to host '127.0.0.2'", env=sshd.env())


@pytest.mark.ssh
def test_remote_host_without_hvd_launch_fails_naming_it(sshd):
    _fails_fast("-np", 1, "-H", "127.0.0.2:1", "-p", sshd.port, "-i", sshd.identity_file,
                "true", code=1, match="cannot import horovod.runner",
                env=sshd.env(HVDRUN_REMOTE_PYTHON="/bin/false"))


def test_command_that_does_not_exist_fails_its_rank():
    result = horovodrun("-np", 2, "/no/such/program")
    assert result.returncode == 127
    assert "cannot start '/no/such/program'" in result.stderr


def test_output_filename_that_cannot_be_created_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    _fails_fast("-np", 1, "--output-filename", blocker, "true", code=2, match="cannot create")
