# elastic.py - what each rank runs in test_elastic.py: the shared
# elastic worker side (State, ObjectState, run_fn) on the numpy API. Each
# scenario prints one JSON line with what the test checks.
"""Rank programs for test_elastic.py (run as real hvd ranks)."""

import numpy as np

import horovod.common as hvd
from horovod.common import testing
from horovod.common.elastic import HostUpdateResult, ObjectState, notification_manager, run_fn


def _reset():
    hvd.shutdown()
    hvd.init()


def _diverge(tag):
    """Blocks this rank in an allreduce that no other rank submits (its name ends
    with the rank): the engine reports the divergence as HorovodInternalError on
    every rank after HOROVOD_PEER_TIMEOUT_SECONDS."""
    hvd.allreduce(np.zeros(1, np.float32), name="%s.only_rank_%d" % (tag, hvd.rank()))



def object_state_sync_restore_commit():
    hvd.init()
    rank = hvd.rank()
    state = ObjectState(hvd.broadcast_object, hvd.rank, epoch=10 + rank, batch=20 + rank, history=[rank])
    state.sync()
    after_sync = [state.epoch, state.batch, state.history]
    state.epoch, state.batch = 99, 98
    # Values are kept as they are, not copied (as in Horovod): replace them,
    # do not change them in place, between commits.
    state.history = state.history + ["uncommitted"]
    state.restore()
    after_restore = [state.epoch, state.batch, state.history]
    state.epoch, state.batch = 11, 21
    state.commit()
    state.epoch = 12
    state.restore()
    testing.report(dict(after_sync=after_sync, after_restore=after_restore,
                        after_commit_restore=[state.epoch, state.batch]))


def host_updates_raise_on_every_rank():
    hvd.init()
    rank = hvd.rank()
    state = ObjectState(hvd.broadcast_object, hvd.rank, epoch=0)
    notification_manager.register_listener(state)
    outcomes = []

    def commit_outcome():
        try:
            state.commit()
            return "none"
        except hvd.HostsUpdatedInterrupt as e:
            return "interrupt skip_sync=%s" % e.skip_sync

    # Only rank 0 has heard of the update: rank 0's view decides for all.
    if rank == 0:
        notification_manager.handle_hosts_updated(100, HostUpdateResult.added)
    outcomes.append(commit_outcome())
    # Nothing new since: no interrupt.
    outcomes.append(commit_outcome())
    # A removal only: the survivors may skip the state sync.
    if rank == 0:
        notification_manager.handle_hosts_updated(200, HostUpdateResult.removed)
        notification_manager.handle_hosts_updated(150, HostUpdateResult.added)  # older than 200: ignored
    outcomes.append(commit_outcome())
    # An update only rank 1 has heard of does not interrupt anyone yet.
    if rank == 1:
        notification_manager.handle_hosts_updated(300, HostUpdateResult.added)
    outcomes.append(commit_outcome())
    # A removal and an addition between two checks: the state must be synced.
    if rank == 0:
        notification_manager.handle_hosts_updated(400, HostUpdateResult.removed)
        notification_manager.handle_hosts_updated(401, HostUpdateResult.added)
    outcomes.append(commit_outcome())
    notification_manager.remove_listener(state)
    testing.report(dict(outcomes=outcomes))


class _CountingState(ObjectState):
    def __init__(self, **kwargs):
        self.syncs = 0
        super().__init__(hvd.broadcast_object, hvd.rank, **kwargs)

    def sync(self):
        self.syncs += 1
        super().sync()


def run_rolls_back_and_rejoins_after_failure():
    hvd.init()
    state = _CountingState(step=0, total=0.0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    calls = []

    @hvd_elastic_run
    def train(state):
        calls.append(state.step)
        while state.step < 6:
            total = hvd.allreduce(np.array([state.step + 1.0]), op=hvd.Sum, name="step")[0]
            state.total += float(total)
            state.step += 1
            if state.step % 2 == 0:
                state.commit()
            if state.step == 5 and len(calls) == 1:
                # Step 5 is not committed: the failure rolls it back to step 4.
                _diverge("first_attempt")
        return state.step

    result = train(state)
    testing.report(dict(result=result, calls=calls, resets=resets, syncs=state.syncs, total=state.total))


def hvd_elastic_run(func):
    return run_fn(func, _reset)


def ranks_agree_whether_to_sync():
    # After an update that only removed hosts, a rank may skip the sync, but
    # another (here: one that had a failure; in a real job: a new worker)
    # needs it. Every rank must then sync, or the ones syncing would wait in
    # a broadcast the others never join.
    hvd.init()
    rank = hvd.rank()
    state = _CountingState(value=100 + rank)
    attempts = []

    @hvd_elastic_run
    def train(state):
        attempts.append(state.value)
        if len(attempts) == 1:
            state.value = 7
            if rank == 0:
                state.save()  # 7 is what the sync sends (rank 0's values)
                raise hvd.HostsUpdatedInterrupt(skip_sync=True)
            raise hvd.HorovodInternalError("simulated failure on rank %d" % rank)  # back to 100
        return hvd.allreduce(np.array([float(state.value)]), op=hvd.Sum, name="after")[0]

    result = train(state)
    testing.report(dict(result=float(result), attempts=attempts, syncs=state.syncs))


def skip_sync_when_every_rank_agrees():
    hvd.init()
    state = _CountingState(value=hvd.rank())
    attempts = []

    @hvd_elastic_run
    def train(state):
        attempts.append(state.value)
        if len(attempts) == 1:
            state.value += 10 + hvd.rank()  # differs per rank: a sync would undo it
            state.commit()
            raise hvd.HostsUpdatedInterrupt(skip_sync=True)
        return state.value

    result = train(state)
    testing.report(dict(result=result, attempts=attempts, syncs=state.syncs))


def run_on_a_single_process():
    hvd.init()
    state = ObjectState(hvd.broadcast_object, hvd.rank, n=0)
    calls = []

    def train(state):
        calls.append(state.n)
        state.n += 1
        state.commit()
        if len(calls) == 1:
            state.n += 5
            raise hvd.HorovodInternalError("simulated")
        return state.n
    testing.report({"result": run_fn(train, _reset)(state), "calls": calls})
