# test_failures.py - a peer that dies or freezes turns every pending and later
# collective on every survivor into HorovodInternalError within the bound;
# shutdown() then init() works again in the same process. What the ranks
# run is in rank_programs/failures.py.
import os
import time

import pytest

import ranks


def _control_ring_names():
    """This user's control-ring segments in /dev/shm (see shm_ring.h)."""
    try:
        entries = os.listdir("/dev/shm")
    except FileNotFoundError:
        return set()
    return {e for e in entries if e.startswith("hvd-r") and os.stat("/dev/shm/" + e).st_uid == os.geteuid()}


@pytest.mark.parametrize("np_", [2, 3, 4])
@pytest.mark.parametrize("victim", [0, 1])
def test_killed_peer_fails_survivors_within_five_seconds(np_, victim):
    results = ranks.run_program(np_, "failures:peer_stops_mid_loop", timeout=60,
                                kwargs={"victim": victim, "signal_name": "SIGKILL"})
    for res in results:
        if res.rank == victim:
            assert res.returncode == -9
            continue
        assert res.returncode == 0, str(res)
        out = res.last_json()
        assert out["error"], str(res)
        assert out["elapsed"] < 5.5, out
        assert out["later"], out


def test_no_control_ring_outlives_its_job_even_when_the_coordinator_is_killed():
    before = _control_ring_names()
    ranks.run_program_ok(3, "failures:shutdown_and_init_three_times")
    ranks.run_program(3, "failures:peer_stops_mid_loop", timeout=60, kwargs={"victim": 0, "signal_name": "SIGKILL"})
    # Names are unlinked once both sides have mapped them, during start-up;
    # another job starting meanwhile may hold one for a moment.
    deadline = time.time() + 3
    while _control_ring_names() - before and time.time() < deadline:
        time.sleep(0.1)
    assert not _control_ring_names() - before


def test_frozen_peer_is_detected_by_heartbeat():
    # SIGSTOP: no reset ever arrives; only the heartbeat timeout can tell.
    results = ranks.run_program(3, "failures:peer_stops_mid_loop", kwargs={"victim": 2, "signal_name": "SIGSTOP"},
                                env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=40, kill_when_done=[2])
    for res in results[:2]:
        assert res.returncode == 0, str(res)
        out = res.last_json()
        assert out["error"] and out["elapsed"] < 4.0, out
        assert "rank 2" in out["error"], out


def test_peer_death_while_idle_fails_the_next_collective():
    results = ranks.run_program(2, "failures:peer_dies_while_idle", timeout=30)
    assert "error after 0." in results[0].stdout, str(results[0])


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_shutdown_then_init_works_again_in_the_same_process(np_):
    results = ranks.run_program_ok(np_, "failures:shutdown_and_init_three_times")
    n = np_
    for res in results:
        assert res[0] == [float(sum(range(n)))] * 3
        assert res[2] == [float(sum(range(n)) + n)] * 3
        assert res[1] is False and res[5] is False
        assert res[6] == "Horovod has not been initialized; use hvd.init()."


def test_pending_operations_fail_when_a_rank_shuts_down():
    results = ranks.run_program(2, "failures:rank_0_shuts_down_while_rank_1_waits", timeout=30)
    assert results[0].returncode == 0 and "shut down" in results[0].stdout, str(results[0])
    assert "internal:" in results[1].stdout and "shut down" in results[1].stdout, str(results[1])


def test_hvd_abort_fails_every_rank_with_its_reason_and_init_starts_again():
    # The C ABI's hvd_abort (as NCCL's ncclCommAbort): rank 2 gives up while
    # ranks 0 and 1 wait in a collective it never joins.
    results = ranks.run_program_ok(3, "failures:rank_2_aborts", timeout=60)
    for res in results:
        assert "rank 2 aborted the job (hvd_abort): input pipeline broke" in res["error"], res
        assert res["seconds"] < 5 and res["async"] and "input pipeline broke" in res["async"], res
        assert res["after"] == [3.0], res
    for res in results[:2]:
        assert "input pipeline broke" in res["pair"], res


def test_other_threads_are_answered_while_init_waits_for_a_late_peer():
    # Start-up holds its lock through the wait for peers; the engine's state
    # is guarded by another, so other threads are not held up with it.
    rank0, rank1 = ranks.run_program_ok(2, "failures:other_threads_answer_while_init_waits", kwargs={"late_by": 3},
                                        timeout=60)
    assert rank0["init_seconds"] >= 2.5, rank0
    assert rank0["slowest_answer"] < 0.5, rank0
    assert rank0["answered_not_yet"] >= 20 and rank0["after"] is True, rank0
    assert rank0["sum"] == rank1["sum"] == 2.0
