# interrupts.py - rank side of test_interrupts.py: signals arriving while a
# rank waits on a collective.
"""Rank programs for test_interrupts.py."""

import signal
import time

import numpy as np

import horovod.common as hvd
from horovod.common import engine_calls, testing


def rank_0_interrupted_in_a_collective(marker_dir, collective="allreduce_", warm_up=False):
    hvd.init()
    out = {}
    x = np.arange(4, dtype=np.float32) + hvd.rank()
    if collective == "allreduce_":
        def late():
            hvd.allreduce_(x, op=hvd.Sum, name="late")
    elif collective == "allreduce":  # out of place
        def late():
            out["reduced"] = hvd.allreduce(x, op=hvd.Sum, name="late").tolist()
    else:  # a result the engine allocates, through the synchronous path
        def late():
            out["gathered"] = hvd.allgather(x, name="late").tolist()
    if warm_up:  # the same call made once before: its block is cached (the accelerator's table)
        late()
        out.clear()
    waited = testing.interrupt_first_rank(late, hvd.rank(), marker_dir)
    if hvd.rank() == 0:
        out["interrupted"] = waited is not None
        if waited is not None:
            out["waited"] = waited  # from the signal to the exception
            # What the operation still in flight keeps alive: for an out-of-place
            # call, the result array it writes into, which the caller never got.
            out["kept"] = [[list(a.shape) for a in kept if isinstance(a, np.ndarray)] if isinstance(kept, tuple)
                           else [list(kept.shape)] for kept in engine_calls._abandoned.values()]
    # The interrupted collective was still in flight on rank 0 and completed
    # once rank 1 submitted it: an allreduce_ into x, which hvd kept alive.
    after = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="after")
    out["x"] = x.tolist()
    out["after"] = after.tolist()
    out["after_gather"] = hvd.allgather(np.full(2, hvd.rank(), np.int32), name="after_gather").tolist()
    return out


class Alarm(Exception):
    pass


def _on_alarm(signum, frame):
    raise Alarm()


def rank_0_alarmed_in_a_wait():
    """Rank 0 prints how long the alarm took to end its wait, then "shut down" (as does rank 1)."""
    hvd.init()
    if hvd.rank() == 0:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        buf = np.ones(1 << 16, np.float32)
        handle = hvd.allreduce_async_(buf, name="never")  # rank 1 never submits it
        start = time.monotonic()
        try:
            hvd.synchronize(handle)
            print("no alarm")
        except Alarm:
            print("alarm after %.2f s" % (time.monotonic() - start))
        # The handle is still pending; shutdown fails it and frees what it held.
        hvd.shutdown()
        print("shut down")
    else:
        time.sleep(3)
        hvd.shutdown()
        print("shut down")
