"""Jobs whose ranks really run hvd-core's engine: init, rank ids, allreduce across ranks."""

import functools
import os
import re
import subprocess
import sys

import pytest

import horovod.runner
from launch_harness import base_env, horovodrun, mpi_env

pytestmark = pytest.mark.engine

# What the ranks run (engine_worker.py ALLREDUCE reports one line per rank).
ENGINE_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_worker.py")
ALLREDUCE = [ENGINE_WORKER, "allreduce"]


@functools.lru_cache(maxsize=None)
def _engine_problem():
    code = "import horovod.common as hvd; hvd.init(); assert hvd.size() == 1; hvd.shutdown()"
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=60, env=base_env())
    except subprocess.TimeoutExpired:
        return "hvd.init() in a single process timed out"
    if result.returncode != 0:
        return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "exit %d" % result.returncode
    return None


@pytest.fixture(autouse=True)
def _needs_engine():
    problem = _engine_problem()
    if problem:
        pytest.skip(f"hvd-core's engine is not usable here (pip install ./packages/hvd-core): {problem}")


def _rows(stdout):
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(\d+)\]<stdout>:(.*)$", line)
        assert match, line
        values = match.group(2).split()
        rows[int(values[0])] = [int(v) for v in values[1:6]] + [float(values[6])]
    return rows


@pytest.mark.parametrize("num_proc", [1, 2, 4])
def test_local_ranks_get_their_ids_and_allreduce(num_proc):
    result = horovodrun("-np", num_proc, sys.executable, *ALLREDUCE, timeout=120)
    assert result.returncode == 0, result.stderr
    expected_sum = num_proc * (num_proc + 1) / 2
    assert _rows(result.stdout) == {
        r: [num_proc, r, num_proc, 0, 1, expected_sum] for r in range(num_proc)}


@pytest.mark.ssh
def test_two_host_job_over_ssh_gets_host_ranks_and_allreduces(sshd):
    result = horovodrun("-np", 4, "-H", "localhost:2,127.0.0.2:2", "-p", sshd.port,
                        "-i", sshd.identity_file, sys.executable, *ALLREDUCE,
                        env=sshd.env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert _rows(result.stdout) == {
        0: [4, 0, 2, 0, 2, 10.0], 1: [4, 1, 2, 0, 2, 10.0],
        2: [4, 0, 2, 1, 2, 10.0], 3: [4, 1, 2, 1, 2, 10.0]}


@pytest.mark.mpi
def test_mpi_job_ranks_get_their_ids_and_allreduce(mpi_bin):
    result = horovodrun("--mpi", "-np", 2, sys.executable, *ALLREDUCE, env=mpi_env(mpi_bin),
                        timeout=120)
    assert result.returncode == 0, result.stderr
    assert _rows(result.stdout) == {0: [2, 0, 2, 0, 1, 3.0], 1: [2, 1, 2, 0, 1, 3.0]}


def allreduce_rank():
    import numpy as np
    import horovod.common as hvd
    hvd.init()
    try:
        return float(hvd.allreduce(np.array([float(hvd.rank())]), op=hvd.Sum)[0]), hvd.rank()
    finally:
        hvd.shutdown()


def test_horovod_run_returns_each_ranks_allreduce_result(monkeypatch):
    for name, value in base_env().items():
        monkeypatch.setenv(name, value)
    assert horovod.runner.run(allreduce_rank, num_proc=3) == [(3.0, 0), (3.0, 1), (3.0, 2)]


def test_rank_killed_mid_job_ends_the_job_naming_it():
    result = horovodrun("-np", 3, sys.executable, ENGINE_WORKER, "killed-mid-job", timeout=120,
                        env=base_env(HOROVOD_GLOO_TIMEOUT_SECONDS="5"))
    assert result.returncode == 137, result.stderr
    assert "job failed: rank 1 (host localhost, local rank 1) was killed by signal 9" in result.stderr


@pytest.mark.mpi
def test_plain_mpirun_without_horovodrun_runs_an_allreduce(mpi_bin):
    env = mpi_env(mpi_bin, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = [os.path.join(mpi_bin, "mpirun"), "-np", "2"]
    if "Open MPI" in subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout:
        argv.append("--oversubscribe")
    result = subprocess.run(argv + [sys.executable, *ALLREDUCE], env=env, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    rows = sorted(line.split() for line in result.stdout.splitlines())
    assert [row[0] for row in rows] == ["0", "1"] and all(row[-1] == "3.0" for row in rows)
