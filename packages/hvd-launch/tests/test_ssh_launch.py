"""Two-"host" jobs over a real sshd on loopback: localhost starts directly, 127.0.0.2 over ssh."""

import json
import os
import re
import sys
import time

import pytest

from launch_harness import horovodrun, pid_alive, wait_until

pytestmark = pytest.mark.ssh

# Each worker records its pid and its grandchild's, then does what its action says.
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pid_recording_worker.py")
PRINT_ENV = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
             "if k.startswith(('HOROVOD_', 'CALLER_'))} | {'cwd': os.getcwd(), 'pid': os.getpid()}))")


def _ssh_args(sshd):
    return ["-p", sshd.port, "-i", sshd.identity_file]


def _envs(stdout):
    envs = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(\d+)\]<stdout>:(.*)$", line)
        assert match, line
        envs[int(match.group(1))] = json.loads(match.group(2))
    return envs


def test_two_host_job_places_ranks_and_forwards_environment(sshd, tmp_path):
    result = horovodrun("-np", 4, "-H", "localhost:2,127.0.0.2:2", *_ssh_args(sshd),
                        sys.executable, "-c", PRINT_ENV, cwd=tmp_path,
                        env=sshd.env(CALLER_SETTING="over ssh"))
    assert result.returncode == 0, result.stderr
    envs = _envs(result.stdout)
    assert sorted(envs) == [0, 1, 2, 3]
    expected = {0: ("localhost", 0, 0), 1: ("localhost", 1, 0),
                2: ("127.0.0.2", 0, 1), 3: ("127.0.0.2", 1, 1)}
    for rank, (host, local_rank, cross_rank) in expected.items():
        env = envs[rank]
        assert env["HOROVOD_HOSTNAME"] == host
        assert env["HOROVOD_LOCAL_RANK"] == str(local_rank)
        assert env["HOROVOD_LOCAL_SIZE"] == "2"
        assert env["HOROVOD_CROSS_RANK"] == str(cross_rank)
        assert env["HOROVOD_CROSS_SIZE"] == "2"
        assert env["HOROVOD_SIZE"] == "4"
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert env["CALLER_SETTING"] == "over ssh"
        assert env["cwd"] == str(tmp_path)
    assert len({env["HOROVOD_SECRET_KEY"] for env in envs.values()}) == 1


def test_hostfile_job_over_ssh_places_one_rank_per_host(sshd, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    result = horovodrun("-hostfile", hostfile, *_ssh_args(sshd), sys.executable, "-c", PRINT_ENV,
                        env=sshd.env())
    assert result.returncode == 0, result.stderr
    assert [e["HOROVOD_HOSTNAME"] for _, e in sorted(_envs(result.stdout).items())] == [
        "localhost", "127.0.0.2"]


def test_remote_rank_failure_stops_local_and_remote_ranks(sshd, tmp_path):
    start = time.monotonic()
    result = horovodrun("-np", 4, "-H", "localhost:2,127.0.0.2:2", *_ssh_args(sshd),
                        sys.executable, WORKER, tmp_path, "--stagger", 0.25, "2=exit7", env=sshd.env())
    assert result.returncode == 7
    assert "rank 2 (host 127.0.0.2, local rank 0) exited with code 7" in result.stderr
    assert time.monotonic() - start < 30
    pids = [int(pid) for r in range(4) for pid in (tmp_path / f"pids.{r}").read_text().split()]
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=10)


def test_remote_rank_killed_by_signal_is_reported(sshd, tmp_path):
    result = horovodrun("-np", 2, "-H", "localhost:1,127.0.0.2:1", *_ssh_args(sshd),
                        sys.executable, WORKER, tmp_path, "1=kill", env=sshd.env())
    assert result.returncode == 137
    assert "rank 1 (host 127.0.0.2, local rank 0) was killed by signal 9 (SIGKILL)" in result.stderr


def test_remote_output_is_prefixed_and_written_to_files(sshd, tmp_path):
    out = tmp_path / "out"
    result = horovodrun("-np", 2, "-H", "localhost:1,127.0.0.2:1", *_ssh_args(sshd),
                        "--output-filename", out, sys.executable, "-c",
                        "import os, sys; print('hello', os.environ['HOROVOD_RANK']); "
                        "print('warn', file=sys.stderr)", env=sshd.env())
    assert result.returncode == 0, result.stderr
    assert "[1]<stdout>:hello 1" in result.stdout.splitlines()
    assert "[1]<stderr>:warn" in result.stderr.splitlines()
    assert (out / "rank.1" / "stdout").read_text() == "hello 1\n"
