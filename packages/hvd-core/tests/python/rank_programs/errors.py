# errors.py - rank side of test_errors.py: bad input and cross-rank
# mismatches, each rank reporting the error it got and whether the engine
# still works afterwards.
"""Rank programs for test_errors.py."""

import os
import time

import numpy as np

import horovod.common as hvd

# One disagreement between ranks per case; `rank` is the caller's rank.
MISMATCHES = {
    "shape": lambda rank: hvd.allreduce(np.zeros(3 + rank, np.float32), name="t"),
    "dtype": lambda rank: hvd.allreduce(np.zeros(3, np.float32 if rank == 0 else np.int32), name="t"),
    "op": lambda rank: hvd.allreduce(np.zeros(3, np.float32), op=hvd.Sum if rank == 0 else hvd.Max, name="t"),
    "root": lambda rank: hvd.broadcast(np.zeros(3, np.float32), root_rank=0 if rank == 0 else 1, name="t"),
    "prescale": lambda rank: hvd.allreduce(np.zeros(3, np.float32), op=hvd.Sum, prescale_factor=1.0 + rank,
                                           name="t"),
    "allgather_tail": lambda rank: hvd.allgather(np.zeros((2, 3 + rank), np.float32), name="t"),
}


def mismatch(case):
    hvd.init()
    rank = hvd.rank()
    out = {}
    try:
        MISMATCHES[case](rank)
        out["raised"] = None
    except hvd.HorovodCollectiveMismatchError as e:
        out["raised"] = str(e)
    # The engine is still usable.
    out["after"] = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="after").tolist()
    return out


def different_names_on_different_ranks():
    hvd.init()
    try:
        hvd.allreduce(np.zeros(1, np.float32), name="only_on_%d" % hvd.rank())
        print("no error")
    except hvd.HorovodInternalError as e:
        print("internal:", e)


def blocked_in_different_collectives():
    hvd.init(process_sets="dynamic")
    ps = hvd.add_process_set([1])
    start = time.monotonic()
    try:
        if hvd.rank() == 0:
            hvd.remove_process_set(ps)
        else:
            hvd.barrier()
        out = {"raised": None}
    except hvd.HorovodInternalError as e:
        out = {"raised": str(e), "after_s": time.monotonic() - start}
    try:
        hvd.allreduce(np.ones(1, np.float32), name="still_broken")
        out["still_broken"] = False
    except hvd.HorovodInternalError:
        out["still_broken"] = True
    hvd.init()  # the failed engine is replaced, on every rank together
    out["later"] = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="later").tolist()
    return out


def divergence_while_rank_2_computes():
    hvd.init()
    rank = hvd.rank()
    if rank == 2:
        time.sleep(8)
    start = time.monotonic()
    try:
        hvd.allreduce(np.ones(1, np.float32), name="only_%d" % rank)
        out = {"raised": None}
    except hvd.HorovodInternalError as e:
        out = {"raised": str(e), "after_s": time.monotonic() - start}
    return out


def rank_1_restarts_its_engine():
    hvd.init()
    hvd.allreduce(np.ones(1, np.float32), name="first")
    out = {}
    if hvd.rank() == 1:
        hvd.shutdown()
    else:
        time.sleep(1)
        try:
            hvd.allreduce(np.ones(1, np.float32), name="into_the_void")
            out["void"] = None
        except hvd.HorovodInternalError as e:
            out["void"] = str(e)
    hvd.init()
    out["again"] = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="again").tolist()
    return out


def bad_input_single_process():
    """Prints one line per bad call: the error it raised (in order, for the test to check)."""
    errors = []
    try:
        hvd.rank()
    except ValueError as e:
        errors.append(str(e))
    try:
        hvd.allreduce(np.zeros(3, np.float32))
    except ValueError as e:
        errors.append(str(e))
    hvd.init()
    for f in [lambda: hvd.allreduce(np.zeros(3, np.complex64)),
              lambda: hvd.allreduce(np.zeros((4, 4), np.float32)[:, 1]),
              lambda: hvd.broadcast(np.zeros(3, np.float32), root_rank=5),
              lambda: hvd.broadcast(np.zeros(3, np.float32), root_rank=-1),
              lambda: hvd.alltoall(np.zeros(4, np.float32), splits=[3]),
              lambda: hvd.allgather(np.array(3.0, np.float32)),
              lambda: hvd.allreduce([1, 2, 3]),
              lambda: hvd.allreduce(np.zeros(3, np.float32), op=hvd.Sum, average=True),
              lambda: hvd.allreduce(np.zeros(3, bool), op=hvd.Average),
              lambda: hvd.reducescatter(np.zeros(4, np.float32), op=hvd.Adasum)]:
        try:
            f()
            errors.append("no error")
        except (ValueError, TypeError) as e:
            errors.append(type(e).__name__ + ": " + str(e) + (" (RuntimeError)" if isinstance(e, RuntimeError) else ""))
    for e in errors:
        print(e)


def duplicate_in_flight_name():
    hvd.init()
    out = {}
    if hvd.rank() == 1:
        time.sleep(1.0)
    h = hvd.allreduce_async(np.ones(4, np.float32), name="dup", op=hvd.Sum)
    if hvd.rank() == 0:
        try:
            hvd.allreduce_async(np.ones(4, np.float32), name="dup")
            out["second"] = None
        except ValueError as e:
            out["second"] = str(e)
    out["first"] = hvd.synchronize(h).tolist()
    # Once synchronized, the name is free again.
    out["reuse"] = hvd.allreduce(np.ones(4, np.float32), name="dup", op=hvd.Sum).tolist()
    # Finished in the engine but not yet synchronized is still in flight: the
    # rule does not depend on how fast the engine was (deterministic).
    h = hvd.broadcast_async(np.ones(2, np.float32), root_rank=0, name="done")
    while not hvd.poll(h):
        time.sleep(0.01)
    try:
        hvd.broadcast_async(np.ones(2, np.float32), root_rank=0, name="done")
        out["after_poll"] = None
    except ValueError as e:
        out["after_poll"] = str(e)
    hvd.synchronize(h)
    return out


def name_twice_in_one_group():
    """A group that names one tensor twice, enqueued straight through the C
    ABI (horovod.common's own calls give every tensor of a group its own
    name): the engine refuses it, names the tensor, and the names it
    reserved while checking are free for the next group, which runs."""
    from horovod.common import c_api, engine_calls

    hvd.init()
    arrays = [np.full(4, float(hvd.rank() + i), np.float32) for i in range(3)]
    descs = [engine_calls.TensorDesc(a.ctypes.data, a.shape, c_api.kDLFloat, 32) for a in arrays]
    out = {}
    try:
        engine_calls.enqueue(c_api.ALLREDUCE, descs, [b"allreduce.x", b"allreduce.y", b"allreduce.x"],
                             reduce_op=hvd.Sum)
        out["refused"] = None
    except ValueError as e:
        out["refused"] = str(e)
    handle, _ = engine_calls.enqueue(c_api.ALLREDUCE, descs[:2], [b"allreduce.x", b"allreduce.y"], outputs=descs[:2],
                                     reduce_op=hvd.Sum)  # in place
    library = c_api.lib()
    try:
        c_api.check(engine_calls._wait(library, handle))
    finally:
        library.hvd_handle_release(handle)
    out["after"] = [a.tolist() for a in arrays[:2]]
    return out


def rank_1_submits_late():
    hvd.init()
    if hvd.rank() == 1:
        time.sleep(3.5)  # submits late: a stall, not a failure
    out = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="late_grad")
    return out.tolist()


class Comm:
    """What mpi4py's Intracomm offers that init() looks at."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def Get_size(self):
        return self.size

    def Get_rank(self):
        return self.rank


def init_with_comm():
    rank = int(os.environ["HOROVOD_RANK"])
    out = {}
    hvd.init(comm=Comm(2, rank))
    out["world_comm"] = hvd.size() == 2
    hvd.shutdown()
    hvd.init(comm=[0, 1])
    out["rank_list"] = hvd.size() == 2
    hvd.shutdown()
    for bad in (Comm(1, 0), [0]):
        try:
            hvd.init(comm=bad)
            out[str(bad)] = "accepted"
        except ValueError as e:
            out[str(bad)] = "process_sets=" in str(e) and not hvd.is_initialized()
    try:
        hvd.init(comm=object())
        out["object"] = "accepted"
    except ValueError as e:
        out["object"] = "mpi4py communicator or a list of ranks" in str(e)
    return out
