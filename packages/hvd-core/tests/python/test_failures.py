# test_failures.py - a peer that dies or freezes turns every pending and later
# collective on every survivor into HorovodInternalError within the bound;
# shutdown() then init() works again in the same process. What the ranks
# run is in rank_programs/failures.py.
import hashlib
import os
import signal
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


def _survivors_failed_fast(results, victim):
    for res in results:
        if res.rank == victim:
            assert res.returncode == -9
            continue
        assert res.returncode == 0, str(res)
        out = res.last_json()
        assert out["error"], str(res)
        assert out["elapsed"] < 5.5, out
        assert out["later"], out


@pytest.mark.parametrize("np_", [2, 3, 4])
@pytest.mark.parametrize("victim", [0, 1])
def test_killed_peer_fails_survivors_within_five_seconds(np_, victim):
    _survivors_failed_fast(ranks.run_program(np_, "failures:peer_stops_mid_loop", timeout=60,
                                             kwargs={"victim": victim, "signal_name": "SIGKILL"}), victim)


@pytest.mark.parametrize("collective", ["allgather", "reducescatter"])
def test_killed_peer_fails_survivors_of_small_allgathers_and_reducescatters(collective):
    # After their first call these run in the fast lane, as the allreduces above do.
    _survivors_failed_fast(ranks.run_program(3, "failures:peer_stops_mid_loop", timeout=60,
                                             kwargs={"victim": 1, "signal_name": "SIGKILL",
                                                     "collective": collective}), 1)


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("collective", ["broadcast", "allgather", "broadcast read", "allgather read"])
def test_killed_peer_fails_survivors_of_streamed_broadcasts_and_allgathers(np_, collective):
    # "... read": the ranks copy what they receive out of the writers'
    # processes instead of the ring (the writers wait until all have).
    env = {"HVD_SHM_LANE_BROADCAST": "read"} if collective.endswith(" read") else None
    _survivors_failed_fast(ranks.run_program(np_, "failures:peer_killed_mid_stream", timeout=60, env=env,
                                             kwargs={"collective": collective.split()[0]}), 1)


_LONG_HOLD = {"HOROVOD_CYCLE_TIME": "60000", "HVD_HOLD_GAP_US": "60000000"}


@pytest.mark.parametrize("victim", [0, 1])
def test_killed_peer_fails_a_held_burst_of_async_allreduces_within_five_seconds(victim):
    # Holds of 60 s: the survivor's allreduces are still in its queue, never
    # sent, when the peer dies; they fail with the set, not after the hold.
    _survivors_failed_fast(ranks.run_program(2, "failures:peer_stops_while_a_burst_is_held", timeout=60,
                                             kwargs={"victim": victim, "signal_name": "SIGKILL"}, env=_LONG_HOLD),
                           victim)


def test_frozen_peer_fails_a_held_burst_of_async_allreduces_by_heartbeat():
    # The same with SIGSTOP: only the heartbeat timeout (2 s) can tell, and
    # the background thread keeps checking it while the burst is held.
    results = ranks.run_program(2, "failures:peer_stops_while_a_burst_is_held", timeout=60, kill_when_done=[1],
                                kwargs={"victim": 1, "signal_name": "SIGSTOP"},
                                env=dict(_LONG_HOLD, HOROVOD_PEER_TIMEOUT_SECONDS="2"))
    out = results[0].last_json()
    assert results[0].returncode == 0, str(results[0])
    assert out["error"] and "rank 1" in out["error"] and out["elapsed"] < 4.0, out
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


class _SignalInsideProcessSetCreation:
    """A store watcher that signals rank `victim` when it reaches `key_suffix` of process set 1.

    The watcher runs before the store answers the victim's request, so the
    victim is stopped or killed inside hvd.add_process_set, after the ranks
    agreed on the set and before it has finished its part of creating it.
    """

    def __init__(self, victim, key_suffix, signal_name):
        self.victim, self.key_suffix, self.signum = victim, key_suffix, getattr(signal, signal_name)
        self.pid = None
        self.set_key = None  # the new set's key ("<job>/g0/ps1"): its arena's name derives from it
        self.arena_existed = False  # when the victim was signalled (so the name below is the right one)

    def __call__(self, server):
        server.watch(self.on_change)

    def on_change(self, key, value):
        if key.endswith(b"/g0/peer/%d" % self.victim):
            self.pid = int(value.split(b"\n")[2])  # the engine publishes host, address, pid, ...
        elif key.endswith(b"/ps1" + self.key_suffix) and self.set_key is None:
            self.set_key = key[:-len(self.key_suffix)]
            os.kill(self.pid, self.signum)
            self.arena_existed = os.path.exists(self.arena_path())

    def arena_path(self):
        return "/dev/shm/hvd-" + hashlib.sha256(self.set_key).hexdigest()[:40]


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("victim,key_suffix", [(0, b"/shm/ready"), (1, b"/shm/attached")])
def test_peer_lost_while_a_process_set_is_created_fails_survivors_within_the_peer_timeout(victim, key_suffix,
                                                                                         signal_name):
    # Creating a set waits for its members (shared memory, connections) as
    # start-up does, for up to HOROVOD_GLOO_TIMEOUT_SECONDS; a member that
    # dies or freezes meanwhile must be noticed as fast as in a collective.
    watcher = _SignalInsideProcessSetCreation(victim, key_suffix, signal_name)
    results = ranks.run_program(3, "failures:peer_lost_while_a_process_set_is_created", timeout=60,
                                env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2", "HOROVOD_GLOO_TIMEOUT_SECONDS": "30",
                                     "HOROVOD_DYNAMIC_PROCESS_SETS": "1"},
                                kill_when_done=[victim], store_hook=watcher)
    assert watcher.set_key is not None, "the victim never reached %r:\n%s" % (key_suffix, results[victim])
    for res in results:
        if res.rank == victim:
            continue
        assert res.returncode == 0, str(res)
        out = res.last_json()
        assert out["error"] and out["seconds"] < 2 + 3, out
        assert "rank %d" % victim in out["error"], out
    # The set's arena is removed by a survivor, whichever member was lost.
    assert watcher.arena_existed and not os.path.exists(watcher.arena_path())


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
