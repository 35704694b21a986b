"""A failing, killed or interrupted job stops every rank and leaves no process behind."""

import os
import signal
import subprocess
import sys
import time

from launch_harness import base_env, horovodrun, pid_alive, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
# Each worker starts a grandchild, records both pids, then does what its action says.
WORKER = os.path.join(HERE, "pid_recording_worker.py")
ENGINE_WORKER = os.path.join(HERE, "engine_worker.py")


def _recorded_pids(directory, num_proc):
    pids = []
    for rank in range(num_proc):
        with open(os.path.join(directory, f"pids.{rank}")) as f:
            pids += [int(p) for p in f.read().split()]
    return pids


def _all_recorded(directory, num_proc):
    return all(os.path.exists(os.path.join(directory, f"pids.{r}")) for r in range(num_proc))


def _assert_no_survivors(directory, num_proc):
    pids = _recorded_pids(directory, num_proc)
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=10), \
        f"still running: {[p for p in pids if pid_alive(p)]}"


def test_rank_exit_code_stops_the_job_and_is_reported(tmp_path):
    start = time.monotonic()
    result = horovodrun("-np", 3, sys.executable, WORKER, tmp_path, "1=exit3")
    assert time.monotonic() - start < 30
    assert result.returncode == 3
    assert "rank 1 (host localhost, local rank 1) exited with code 3" in result.stderr
    assert "job failed" in result.stderr
    _assert_no_survivors(tmp_path, 3)


def test_a_guard_that_cannot_stop_its_rank_leaves_nothing_behind(tmp_path):
    # The launcher's last resort after the grace period kills the guard and
    # the rank's own process group with it.
    result = horovodrun("-np", 2, sys.executable, WORKER, tmp_path, "0=freeze-guard", "1=exit3",
                        timeout=60)
    assert result.returncode == 3, result.stderr
    _assert_no_survivors(tmp_path, 2)


def test_killed_rank_is_reported_with_its_signal(tmp_path):
    result = horovodrun("-np", 2, sys.executable, WORKER, tmp_path, "0=kill")
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 0 (host localhost, local rank 0) was killed by signal 9 (SIGKILL)" in result.stderr
    _assert_no_survivors(tmp_path, 2)


def test_first_failure_is_named_when_several_ranks_fail(tmp_path):
    result = horovodrun("-np", 3, sys.executable, WORKER, tmp_path, "--stagger", 3, "1=exit4", "2=exit5")
    assert result.returncode == 4
    assert "job failed: rank 1" in result.stderr


def test_rank_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    start = time.monotonic()
    result = horovodrun("-np", 2, sys.executable, WORKER, tmp_path, "--stagger", 2, "0=ignore-term", "1=exit2",
                        env=base_env(HVDRUN_KILL_GRACE_SECONDS="1"))
    assert result.returncode == 2
    assert time.monotonic() - start < 25
    _assert_no_survivors(tmp_path, 2)


def test_successful_job_waits_for_every_rank_and_cleans_up_leftovers(tmp_path):
    result = horovodrun("-np", 2, sys.executable, WORKER, tmp_path, "0=done", "1=done")
    assert result.returncode == 0, result.stderr
    # The grandchildren ("sleep 300") went with their ranks.
    _assert_no_survivors(tmp_path, 2)


def _start_job(tmp_path, num_proc):
    process = subprocess.Popen(
        [sys.executable, "-m", "horovod.runner", "-np", str(num_proc), sys.executable, WORKER,
         str(tmp_path)], env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: _all_recorded(tmp_path, num_proc), timeout=20)
    return process


def test_ctrl_c_stops_the_whole_job(tmp_path):
    process = _start_job(tmp_path, 3)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 128 + signal.SIGINT
    assert "interrupted" in stderr
    _assert_no_survivors(tmp_path, 3)


def test_sigterm_to_the_launcher_stops_the_whole_job(tmp_path):
    process = _start_job(tmp_path, 2)
    process.terminate()
    process.communicate(timeout=20)
    assert process.returncode == 128 + signal.SIGTERM
    _assert_no_survivors(tmp_path, 2)


def test_killed_launcher_leaves_no_orphans(tmp_path):
    process = _start_job(tmp_path, 2)
    process.kill()
    process.communicate(timeout=20)
    pids = _recorded_pids(tmp_path, 2)
    # The guards notice their launcher is gone and stop their ranks.
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=10), \
        f"still running: {[p for p in pids if pid_alive(p)]}"


def test_static_job_with_a_frozen_rank_ends_naming_it():
    start = time.monotonic()
    result = horovodrun("-np", 2, sys.executable, ENGINE_WORKER, "frozen-rank-1", timeout=60,
                        env=base_env(HOROVOD_PEER_TIMEOUT_SECONDS="3"))
    elapsed = time.monotonic() - start
    assert result.returncode != 0, result.stderr
    assert elapsed < 30, elapsed
    assert "rank 1 (host localhost, local rank 1) stopped responding" in result.stderr, result.stderr
    assert "job failed: rank 1" in result.stderr, result.stderr


def test_static_job_names_the_frozen_rank_not_the_neighbours_that_timed_out_waiting_for_it():
    # In a ring rank 1 waits on rank 2 and rank 0 on rank 1: both report a
    # timeout and exit with an error, but only rank 2 stopped.
    start = time.monotonic()
    result = horovodrun("-np", 3, sys.executable, ENGINE_WORKER, "ring-with-rank-2-frozen", timeout=60,
                        env=base_env(HOROVOD_PEER_TIMEOUT_SECONDS="3"))
    assert result.returncode != 0, result.stderr
    assert time.monotonic() - start < 30
    assert "job failed: rank 2" in result.stderr, result.stderr
    assert "stopped responding" in result.stderr, result.stderr
