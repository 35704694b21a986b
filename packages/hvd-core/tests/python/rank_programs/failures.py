# failures.py - rank side of test_failures.py: peers that die, freeze, shut
# down or abort, and what the survivors see.
"""Rank programs for test_failures.py."""

import os
import signal
import threading
import time

import numpy as np

import horovod.common as hvd
from horovod.common import c_api


def peer_stops_mid_loop(victim, signal_name, collective="allreduce"):
    """Rank `victim` sends itself `signal_name` while the others loop on a
    small `collective` (allreduce, allgather or reducescatter: after its
    first call, each runs in the same-host fast lane)."""
    hvd.init()
    rank = hvd.rank()
    x = np.ones(1000, np.float32)
    for i in range(20):
        hvd.allreduce(x, name="warm.%d" % i)
    if rank == victim:
        os.kill(os.getpid(), getattr(signal, signal_name))
    call = getattr(hvd, collective)
    t0 = time.time()
    try:
        while time.time() - t0 < 30:
            call(x, name="loop")
        return {"error": None}
    except hvd.HorovodInternalError as e:
        elapsed = time.time() - t0
        # Every later collective fails the same way, at once.
        try:
            hvd.allreduce(x, name="later")
            later = None
        except hvd.HorovodInternalError as e2:
            later = str(e2)
        return {"error": str(e), "elapsed": elapsed, "later": later}


def peer_killed_mid_stream(collective):
    """Every rank loops on a 2 MiB `collective` (broadcast from rank 0, or
    allgather), which after its first call streams through the fast lane's
    ring; a thread of rank 1 kills its process 0.2 s in, most likely while
    the others wait inside a stream for its chunks or for room in the ring."""
    hvd.init()
    x = np.ones(1 << 19, np.float32)
    if collective == "broadcast":
        def call(name):
            hvd.broadcast_(x, 0, name=name)
    else:
        def call(name):
            hvd.allgather(x, name=name)
    for _ in range(5):
        call("loop")
    if hvd.rank() == 1:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()
    t0 = time.time()
    try:
        while time.time() - t0 < 30:
            call("loop")
        return {"error": None}
    except hvd.HorovodInternalError as e:
        elapsed = time.time() - t0
        try:
            call("later")
            later = None
        except hvd.HorovodInternalError as e2:
            later = str(e2)
        return {"error": str(e), "elapsed": elapsed, "later": later}


def peer_dies_while_idle():
    hvd.init()
    if hvd.rank() == 1:
        hvd.allreduce(np.ones(1, np.float32))
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.allreduce(np.ones(1, np.float32))
    time.sleep(2)
    t0 = time.time()
    try:
        hvd.allreduce(np.ones(1, np.float32))
        print("no error")
    except hvd.HorovodInternalError as e:
        print("error after %.2f s: %s" % (time.time() - t0, e))


def peer_stops_while_a_burst_is_held(victim, signal_name):
    """The others submit five allreduce_async_ that no one waits for, held
    back by the engine (the test makes the hold long), and poll them until
    they are done; rank `victim` sends itself `signal_name` 0.5 s later,
    while they are held."""
    hvd.init()
    x = np.ones(1000, np.float32)
    hvd.allreduce(x, name="warm")
    if hvd.rank() == victim:
        time.sleep(0.5)
        os.kill(os.getpid(), getattr(signal, signal_name))
    t0 = time.time()
    handles = [hvd.allreduce_async_(np.ones(1000, np.float32), name="held.%d" % i) for i in range(5)]
    while not all(hvd.poll(h) for h in handles) and time.time() - t0 < 30:
        time.sleep(0.01)
    elapsed = time.time() - t0
    errors = []
    for h in handles:
        try:
            hvd.synchronize(h)
            errors.append(None)
        except hvd.HorovodInternalError as e:
            errors.append(str(e))
    try:
        hvd.allreduce(x, name="later")
        later = None
    except hvd.HorovodInternalError as e:
        later = str(e)
    return {"error": errors[0] if all(errors) else None, "elapsed": elapsed, "later": later}


def shutdown_and_init_three_times():
    out = []
    for attempt in range(3):
        hvd.init()
        out.append(hvd.allreduce(np.full(3, hvd.rank() + attempt, np.float32), op=hvd.Sum).tolist())
        hvd.shutdown()
        out.append(hvd.is_initialized())
    try:
        hvd.allreduce(np.ones(1, np.float32))
        out.append("no error")
    except ValueError as e:
        out.append(str(e))
    return out


def rank_0_shuts_down_while_rank_1_waits():
    hvd.init()
    if hvd.rank() == 0:
        hvd.shutdown()
        print("shut down")
    else:
        try:
            hvd.allreduce(np.ones(1, np.float32), name="never")
            print("no error")
        except hvd.HorovodInternalError as e:
            print("internal:", e)


def rank_2_aborts():
    lib = c_api.lib()
    pair = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[pair])
    hvd.allreduce(np.ones(1), name="warm")
    t0 = time.time()
    out = {}
    if hvd.rank() == 2:
        time.sleep(0.5)
        c_api.check(lib.hvd_abort(b"input pipeline broke", 20))
        try:
            hvd.allreduce(np.ones(1), name="after")
        except hvd.HorovodInternalError as e:
            out["error"] = str(e)
    else:
        try:
            hvd.allreduce(np.ones(1), name="never")
        except hvd.HorovodInternalError as e:
            out["error"] = str(e)
        try:  # a set without rank 2 ends too: the engine as a whole has failed
            hvd.allreduce(np.ones(1), name="pair", process_set=pair)
            out["pair"] = None
        except hvd.HorovodInternalError as e:
            out["pair"] = str(e)
    out["seconds"] = time.time() - t0
    try:
        c_api.check(lib.hvd_get_async_error())
        out["async"] = None
    except hvd.HorovodInternalError as e:
        out["async"] = str(e)
    hvd.init()
    out["after"] = hvd.allreduce(np.ones(1), op=hvd.Sum, name="again").tolist()
    hvd.barrier()
    hvd.shutdown()
    c_api.check(lib.hvd_abort(None, 0))  # no engine: nothing to do
    return out


def other_threads_answer_while_init_waits(late_by):
    # Rank 1 comes late_by seconds late; meanwhile rank 0's init waits for it
    # on one thread while another keeps asking whether hvd is initialized.
    import threading
    if int(os.environ["HOROVOD_RANK"]) == 1:
        time.sleep(late_by)
        hvd.init()
        return {"sum": float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0])}
    start = time.monotonic()
    init = threading.Thread(target=hvd.init)
    init.start()
    slowest, answers = 0.0, []
    while init.is_alive():
        t0 = time.monotonic()
        answers.append(hvd.is_initialized())
        slowest = max(slowest, time.monotonic() - t0)
        time.sleep(0.05)
    init.join()
    return {"init_seconds": time.monotonic() - start, "slowest_answer": slowest,
            "answered_not_yet": answers.count(False), "after": hvd.is_initialized(),
            "sum": float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0])}


def peer_lost_while_a_process_set_is_created():
    """Ranks 0 and 1 add a set of the two; the test stops or kills one of them inside it.

    Rank 2, not a member, goes on to a collective of the global set.
    """
    hvd.init()
    x = np.ones(4, np.float32)
    hvd.allreduce(x, name="warm")
    t0 = time.monotonic()
    try:
        pair = hvd.add_process_set([0, 1])
        hvd.allreduce(x, name="after", process_set=pair if hvd.rank() < 2 else hvd.global_process_set)
        return {"error": None}
    except hvd.HorovodInternalError as e:
        return {"error": str(e), "seconds": time.monotonic() - t0}
