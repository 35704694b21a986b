"""HOROVOD_CPU_OPERATIONS=mpi: hvd-core's collectives over Open MPI and over MPICH.

The ranks run every collective against a numpy reference computed from all
ranks' deterministic inputs, under ``horovodrun --mpi`` and a plain
``mpirun``; the timeline shows the data went through MPI.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from launch_harness import horovodrun, mpi_env
from test_engine_end_to_end import _needs_engine  # noqa: F401 - skips without the engine

pytestmark = pytest.mark.engine

# What the ranks run: every collective against a numpy reference, one JSON report each.
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_collectives_worker.py")
ENGINE_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_worker.py")

EXPECTED = {"mpi_enabled": True, "allreduce_bad": [], "grouped": True, "allgather": True, "broadcast": True,
            "alltoall": True, "reducescatter": True, "adasum": True, "process_set": True, "join_zeros": True,
            "join": True}


def _reports(stdout, num_proc):
    reports = {}
    for line in stdout.splitlines():
        match = re.search(r"(\{.*\})\s*$", line)
        if match:
            report = json.loads(match.group(1))
            reports[report.pop("rank")] = report
    assert sorted(reports) == list(range(num_proc)), stdout
    return reports


def _check(reports):
    for rank, report in reports.items():
        timeline = report.pop("timeline_mpi", None)
        assert report == EXPECTED, f"rank {rank}: {report}"
        if rank == 0:
            assert timeline, "the timeline shows no MPI_ALLREDUCE / MPI_ALLGATHER activity"


@pytest.mark.mpi
def test_collectives_over_mpi_with_horovodrun_give_the_expected_results(mpi_bin):
    result = horovodrun("--mpi", "-np", 3, sys.executable, WORKER,
                        env=mpi_env(mpi_bin, HOROVOD_CPU_OPERATIONS="mpi", HVD_TEST_TAG="hr"), timeout=180)
    assert result.returncode == 0, result.stderr
    _check(_reports(result.stdout, 3))


@pytest.mark.mpi
def test_collectives_over_mpi_with_plain_mpirun_give_the_expected_results(mpi_bin):
    env = mpi_env(mpi_bin, HOROVOD_CPU_OPERATIONS="MPI", HVD_TEST_TAG="plain",
                  OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = [os.path.join(mpi_bin, "mpirun"), "-np", "2"]
    if "Open MPI" in subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout:
        argv.append("--oversubscribe")
    result = subprocess.run(argv + [sys.executable, WORKER], env=env, capture_output=True, text=True,
                            timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    _check(_reports(result.stdout, 2))


def test_unknown_cpu_operations_and_missing_mpi_library_are_clear_errors(tmp_path):
    # Started with the launcher's environment but no mpirun (horovodrun itself
    # would set HOROVOD_CPU_OPERATIONS=gloo without --mpi).
    from horovod.common import testing
    for env, message in (({"HOROVOD_CPU_OPERATIONS": "ccl"}, "HOROVOD_CPU_OPERATIONS=ccl is not supported"),
                         ({"HOROVOD_CPU_OPERATIONS": "mpi", "HVD_MPI_LIBRARY": str(tmp_path / "libmpi.so")},
                          "cannot load HVD_MPI_LIBRARY=")):
        results = testing.run(2, "import horovod.common as hvd\nhvd.init()\n", env=env, timeout=60)
        for result in results:
            assert result.returncode != 0 and message in result.stderr, result


@pytest.mark.mpi
def test_training_example_over_mpi_ends_with_identical_replicas(mpi_bin):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "numpy",
                          "train_logistic_regression.py")
    result = horovodrun("--mpi", "-np", 2, sys.executable, script, "--epochs", "3",
                        env=mpi_env(mpi_bin, HOROVOD_CPU_OPERATIONS="mpi"), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done: 2 ranks trained identical replicas" in result.stdout, result.stdout


@pytest.mark.mpi
def test_a_killed_rank_ends_an_mpi_data_plane_job_within_seconds(mpi_bin, removes_mpi_segments):
    # A blocked MPI call cannot be interrupted: ending the job is mpirun's
    # and horovodrun's part, and it must still be prompt and name the rank.
    start = time.monotonic()
    result = horovodrun("--mpi", "-np", 2, sys.executable, ENGINE_WORKER, "killed-at-step-20",
                        env=mpi_env(mpi_bin, HOROVOD_CPU_OPERATIONS="mpi"), timeout=120)
    assert time.monotonic() - start < 30
    assert result.returncode == 128 + 9, result.stderr
    assert "job failed: rank 1 (host localhost, local rank 1) was killed by signal 9" in result.stderr
