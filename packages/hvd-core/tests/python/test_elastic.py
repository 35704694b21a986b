# test_elastic.py - the elastic worker side shared by every binding
# (horovod.common.elastic), on real ranks: State/ObjectState semantics, host
# updates raising on every rank alike, and the run loop's recovery from a
# real engine failure (ranks diverging) with the state rolled back to its
# last commit. What the ranks run is in rank_programs/elastic.py.
import ranks


def run_scenario(name, size=2, env=None, timeout=60):
    """Runs rank_programs/elastic.py's `name` as `size` ranks; returns what each reported."""
    return ranks.run_program_ok(size, "elastic:" + name, env=env, timeout=timeout)


def test_object_state_syncs_from_rank_0_restores_and_commits():
    for res in run_scenario("object_state_sync_restore_commit"):
        assert res["after_sync"] == [10, 20, [0]]
        assert res["after_restore"] == [10, 20, [0]]
        assert res["after_commit_restore"] == [11, 21]


def test_host_updates_interrupt_every_rank_in_the_same_commit():
    results = run_scenario("host_updates_raise_on_every_rank")
    assert results[0]["outcomes"] == results[1]["outcomes"] == [
        "interrupt skip_sync=False",  # hosts added, seen by rank 0 only
        "none",                       # nothing new
        "interrupt skip_sync=True",   # hosts removed only (an older addition is ignored)
        "none",                       # only rank 1 has heard of it: rank 0's view decides
        "interrupt skip_sync=False",  # removed and added: the state must be synced
    ]


def test_run_rolls_back_to_last_commit_and_rejoins_after_an_engine_failure():
    results = run_scenario("run_rolls_back_and_rejoins_after_failure", env={"HOROVOD_PEER_TIMEOUT_SECONDS": "1"})
    for res in results:
        assert res["result"] == 6
        # The second call resumes from the last commit (step 4), not from the
        # uncommitted step 5 the failure interrupted.
        assert res["calls"] == [0, 4]
        assert res["resets"] == [2]
        assert res["syncs"] == 2
        # Every step counted once: sum over steps 1..6 of 2 ranks * step.
        assert res["total"] == 42.0


def test_ranks_sync_when_any_rank_needs_it():
    for res in run_scenario("ranks_agree_whether_to_sync", env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}):
        assert res["attempts"] == [100, 7]
        assert res["syncs"] == 2
        assert res["result"] == 14.0


def test_sync_is_skipped_when_every_rank_only_saw_hosts_removed():
    for rank, res in enumerate(run_scenario("skip_sync_when_every_rank_agrees")):
        assert res["attempts"] == [0, 10 + rank]
        assert res["syncs"] == 1
        assert res["result"] == 10 + rank


def test_run_recovers_from_a_failure_on_a_single_process():
    results = run_scenario("run_on_a_single_process", size=1)
    assert results == [{"result": 2, "calls": [0, 1]}]


def test_a_state_registered_after_a_notification_still_gets_it():
    # The listener thread replays the driver's published notifications as soon
    # as it starts, which can be before run() has registered its State.
    from horovod.common.elastic import HostUpdateResult, HostsUpdatedInterrupt, ObjectState, WorkerNotificationManager
    manager = WorkerNotificationManager()
    manager.handle_hosts_updated(10.0, int(HostUpdateResult.added))
    early, late = (ObjectState(bcast_object=lambda value: value, get_rank=lambda: 0) for _ in range(2))
    manager.register_listener(early)
    manager.handle_hosts_updated(20.0, int(HostUpdateResult.removed))
    manager.register_listener(late)
    manager.register_listener(late)  # a second registration replays nothing again
    assert [state._host_messages.qsize() for state in (early, late)] == [2, 2]
    for state in (early, late):
        try:
            state.check_host_updates()
        except HostsUpdatedInterrupt as interrupt:
            # Both updates reached it: an addition means the state is synced.
            assert interrupt.skip_sync is False
        else:
            raise AssertionError("the state never heard of the host updates")
        state.check_host_updates()  # each update counted once: nothing new now
