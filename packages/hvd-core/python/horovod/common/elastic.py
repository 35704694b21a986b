# elastic.py - the worker side of elastic training that every framework
# binding shares: State (what survives a reset: commit/restore/sync), the
# host-update notifications a State listens to, and run_fn, the retry loop
# behind each binding's @hvd.elastic.run. Bindings add only their framework
# states (TorchState, TensorFlowKerasState, ...) and a reset function.
"""Elastic training, worker side: ``State``, ``ObjectState`` and the ``run`` loop."""

import enum
import functools
import queue
import threading

import numpy as np

from horovod.common.elastic_rendezvous import round_horizon
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["HostUpdateResult", "State", "ObjectState", "WorkerNotificationManager", "notification_manager",
           "run_fn"]


class HostUpdateResult(enum.IntFlag):
    """What a host update did to the job's hosts (values as Horovod's)."""
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class WorkerNotificationManager:
    """Hands host-update notifications to the States that listen in this process.

    The elastic driver's notifications arrive through ``handle_hosts_updated``;
    each registered listener (a State) queues them until its next ``commit()``
    or ``check_host_updates()``. A listener registered late is first given the
    notifications that came before it: the listener thread replays the driver's
    published ones as soon as it starts, possibly before ``run`` registers its
    State. The State's round horizon drops those already part of its round.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._listeners = []
        self._received = []

    def init(self):
        """Starts receiving the elastic driver's notifications (once per process). Outside
        an elastic job there is no driver and none come."""
        from horovod.common import elastic_rendezvous
        if elastic_rendezvous.is_elastic():
            elastic_rendezvous.start_notification_listener(self.handle_hosts_updated)

    def register_listener(self, listener):
        with self._lock:
            if listener not in self._listeners:
                for timestamp, update in self._received:
                    listener.on_hosts_updated(timestamp, update)
                self._listeners.append(listener)

    def remove_listener(self, listener):
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def handle_hosts_updated(self, timestamp, update_res):
        """Passes one notification (when it was made, a HostUpdateResult) to every listener."""
        update = HostUpdateResult(update_res)
        # Under the lock (listeners only queue it), so that a listener
        # registering meanwhile gets it exactly once.
        with self._lock:
            self._received.append((timestamp, update))
            for listener in self._listeners:
                listener.on_hosts_updated(timestamp, update)


notification_manager = WorkerNotificationManager()


class State:
    """What a training process must carry across an elastic reset.

    Subclasses say how to save (``save``), roll back to (``restore``) and copy
    from rank 0 to every rank (``sync``) what they hold.

    Args:
        bcast_object: a function that takes a picklable object and returns rank 0's.
        get_rank: a function that returns this process's rank.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds functions (no arguments) to call after every reset, once the new set of
        workers is in place: e.g. to scale the learning rate with the new ``size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        # Notifications from before the reset describe the membership that the
        # reset has just replaced. With hvd's driver the new round says which
        # those are; later ones (published while this process rejoined) stay.
        horizon = round_horizon()
        old, self._host_messages = self._host_messages, queue.Queue()
        while horizon is not None:
            try:
                timestamp, update = old.get_nowait()
            except queue.Empty:
                break
            if timestamp > horizon:
                self._host_messages.put((timestamp, update))
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state (the point a failure rolls back to), then checks for host updates.

        A commit copies the state, possibly from an accelerator, so committing less often
        than every batch trades the steps a failure can lose against time per batch.

        Raises:
            HostsUpdatedInterrupt: on every rank alike, when hosts were added or removed.
        """
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises ``HostsUpdatedInterrupt`` on every rank when the driver has announced that
        hosts were added or removed since the last check."""
        previous = max(self._last_updated_timestamp, round_horizon() or 0)
        newest, what = previous, HostUpdateResult.no_update
        while True:
            try:
                timestamp, update = self._host_messages.get_nowait()
            except queue.Empty:
                break
            if timestamp > newest:
                newest = timestamp
                what |= update
        # Notifications reach the ranks at different moments: rank 0's view is
        # taken by all, so every rank raises in the same step or none does.
        previous, self._last_updated_timestamp, what = self._bcast_object((previous, newest, int(what)))
        if self._last_updated_timestamp > previous:
            raise HostsUpdatedInterrupt(HostUpdateResult(what) == HostUpdateResult.removed)

    def save(self):
        """Copies the state to host memory: ``restore()`` goes back to this copy."""
        raise NotImplementedError()

    def restore(self):
        """Goes back to the last saved copy, dropping what changed since."""
        raise NotImplementedError()

    def sync(self):
        """Makes every rank's state equal to rank 0's."""
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the state is synchronised; nothing by default."""


class ObjectState(State):
    """A State of plain picklable Python values, given as keyword arguments and
    kept as attributes of the same names (``state.epoch``, ``state.batch``, ...).

    Args:
        bcast_object: a function that takes a picklable object and returns rank 0's.
        get_rank: a function that returns this process's rank.
        kwargs: the values to track, by attribute name.
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        # Rank 0's current values, not its last saved ones (as Horovod does):
        # after a host update interrupts training between two commits, the
        # model a subclass broadcasts is the current one, and the plain values
        # (step counters, say) must describe that same model.
        if self._saved_state:
            self.save()
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)


_SYNC_ROUND_NAME = "elastic.state_sync_needed"


def _any_rank_needs_sync(needs_sync):
    """Whether any rank needs the state synchronised, agreed by all ranks.

    A rank that joined with the reset always needs it, whatever the others
    concluded from the update (with skip_sync for a removal only, a newcomer
    would wait in a sync that the others skip: Horovod issue 3494).
    """
    import horovod.common as hvd
    if hvd.size() == 1:
        return needs_sync
    flag = np.array([1 if needs_sync else 0], dtype=np.int32)
    return bool(hvd.allreduce(flag, op=hvd.Max, name=_SYNC_ROUND_NAME)[0])


def run_fn(func, reset):
    """Wraps ``func(state, ...)`` into an elastic loop: ``reset`` is how the binding
    rejoins the job (shut down and init again).

    A ``HorovodInternalError`` (a peer failed) rolls the state back to its last commit;
    a ``HostsUpdatedInterrupt`` keeps it. Either way the process rejoins the job and
    the state's reset callbacks run; then (as on the first call) the ranks agree on
    whether the state needs synchronising, rank 0's state is copied to all ranks if
    so, and ``func`` starts again.
    """
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        notification_manager.register_listener(state)
        notification_manager.init()
        skip_sync = False
        try:
            while True:
                try:
                    if _any_rank_needs_sync(not skip_sync):
                        state.sync()
                    return func(state, *args, **kwargs)
                except HorovodInternalError:
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as interrupt:
                    skip_sync = interrupt.skip_sync
                reset()
                state.on_reset()
        finally:
            notification_manager.remove_listener(state)
    return wrapper
