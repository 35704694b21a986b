"""--mpi with Open MPI and with MPICH (each from PyPI, in its own virtual environment)."""

import json
import re
import sys
import time

import pytest

from launch_harness import horovodrun, mpi_env

pytestmark = pytest.mark.mpi

PRINT_MPI_ENV = (
    "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k in ("
    "'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK', "
    "'OMPI_COMM_WORLD_LOCAL_SIZE', 'PMI_RANK', 'PMI_SIZE', 'MPI_LOCALRANKID', 'MPI_LOCALNRANKS', "
    "'HOROVOD_GLOO_RENDEZVOUS_ADDR', 'HOROVOD_GLOO_RENDEZVOUS_PORT', 'HOROVOD_SECRET_KEY', "
    "'HOROVOD_FUSION_THRESHOLD', 'CALLER_SETTING', 'NCCL_DEBUG')}))")


def _mpi_ids(env):
    if "OMPI_COMM_WORLD_RANK" in env:
        return (int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]),
                int(env["OMPI_COMM_WORLD_LOCAL_RANK"]), int(env["OMPI_COMM_WORLD_LOCAL_SIZE"]))
    return (int(env["PMI_RANK"]), int(env["PMI_SIZE"]), int(env["MPI_LOCALRANKID"]),
            int(env["MPI_LOCALNRANKS"]))


@pytest.mark.parametrize("num_proc", [1, 3])
def test_mpirun_assigns_ranks_and_forwards_the_rendezvous(mpi_bin, num_proc):
    result = horovodrun("--mpi", "-np", num_proc, "--fusion-threshold-mb", "1",
                        sys.executable, "-c", PRINT_MPI_ENV,
                        env=mpi_env(mpi_bin, CALLER_SETTING="kept"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == num_proc, result.stdout
    seen = set()
    for line in lines:
        match = re.match(r"^\[(\d+)\]<stdout>:(.*)$", line)
        assert match, line
        env = json.loads(match.group(2))
        rank, size, local_rank, local_size = _mpi_ids(env)
        assert int(match.group(1)) == rank
        assert (size, local_rank, local_size) == (num_proc, rank, num_proc)
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"].isdigit()
        assert len(env["HOROVOD_SECRET_KEY"]) >= 32
        assert env["HOROVOD_FUSION_THRESHOLD"] == str(1024 * 1024)
        assert env["CALLER_SETTING"] == "kept"
        seen.add(rank)
    assert seen == set(range(num_proc))


def test_mpirun_failure_names_the_rank_and_stops_the_job(mpi_bin):
    code = ("import os, sys, time\n"
            "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK') or os.environ['PMI_RANK'])\n"
            "time.sleep(0.5)\n"
            "sys.exit(3) if rank == 1 else time.sleep(300)\n")
    start = time.monotonic()
    result = horovodrun("--mpi", "-np", 3, sys.executable, "-c", code, env=mpi_env(mpi_bin))
    assert time.monotonic() - start < 30
    assert result.returncode != 0
    assert "horovodrun: rank 1 exited with code 3" in result.stderr
    assert "job failed: rank 1" in result.stderr
    assert result.returncode == 3


def test_mpirun_output_filename_writes_each_ranks_stdout(mpi_bin, tmp_path):
    result = horovodrun("--mpi", "-np", 2, "--output-filename", tmp_path / "out",
                        sys.executable, "-c", "print('hi')", env=mpi_env(mpi_bin))
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (tmp_path / "out" / f"rank.{rank}" / "stdout").read_text() == "hi\n"


def test_mpi_args_are_passed_to_mpirun(mpi_bin):
    # A harmless flag each flavour understands.
    result = horovodrun("--mpi", "--verbose", "--mpi-args", "-np 2", "-np", 2,
                        sys.executable, "-c", "print('x')", env=mpi_env(mpi_bin))
    assert result.returncode == 0, result.stderr
    assert "running " in result.stderr


RECORD_PID_AND_WAIT = ("import os, sys, time\n"
                       "rank = os.environ.get('OMPI_COMM_WORLD_RANK') or os.environ['PMI_RANK']\n"
                       "open(os.path.join(sys.argv[1], 'pid.' + rank), 'w').write(str(os.getpid()))\n"
                       "time.sleep(300)\n")


def test_killed_launcher_leaves_no_mpi_ranks_behind(mpi_bin, tmp_path, removes_mpi_segments):
    import os
    import subprocess

    from launch_harness import pid_alive, wait_until
    process = subprocess.Popen([sys.executable, "-m", "horovod.runner", "--mpi", "-np", "2",
                                sys.executable, "-c", RECORD_PID_AND_WAIT, str(tmp_path)],
                               env=mpi_env(mpi_bin), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    files = [tmp_path / "pid.0", tmp_path / "pid.1"]
    assert wait_until(lambda: all(f.exists() and f.read_text() for f in files), timeout=30)
    process.kill()
    process.wait()
    pids = [int(f.read_text()) for f in files]
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=15), \
        f"still running: {[p for p in pids if pid_alive(p)]} ({os.uname().nodename})"


@pytest.mark.ssh
def test_mpirun_reaches_remote_hosts_with_the_ssh_options(mpi_bin, sshd):
    # The user's environment reaches the remote rank too (as Horovod forwards it).
    env = mpi_env(mpi_bin, HVDRUN_SSH_OPTIONS=sshd.ssh_options, CALLER_SETTING="kept", NCCL_DEBUG="INFO")
    result = horovodrun("--mpi", "-np", 2, "-H", "localhost:1,127.0.0.2:1", "-p", sshd.port,
                        "-i", sshd.identity_file, sys.executable, "-c", PRINT_MPI_ENV, env=env,
                        timeout=120)
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line.split(":", 1)[1]) for line in result.stdout.splitlines()]
    ids = sorted(_mpi_ids(r) for r in reports)
    # One rank per "host": each is local rank 0 of 1.
    assert ids == [(0, 2, 0, 1), (1, 2, 0, 1)]
    for report in reports:
        assert report["CALLER_SETTING"] == "kept" and report["NCCL_DEBUG"] == "INFO", report
