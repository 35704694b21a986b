# errors.py - rank side of test_errors.py: cross-rank mismatches, duplicate
# in-flight names, bad input before and after init, and a peer that dies.
"""Rank programs for test_errors.py."""

import os
import signal
import time
import traceback

import torch

import horovod.torch as hvd
from horovod.common.exceptions import HorovodCollectiveMismatchError

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)


def _grouped_in_place_shape(rank):
    # The first call leaves the group's argument block on every rank; in the
    # second, rank 0 reuses it and the others make a new one for their shape.
    hvd.grouped_allreduce_([torch.zeros(2), torch.zeros(3)], name="t")
    hvd.grouped_allreduce_([torch.zeros(2), torch.zeros(3 + rank)], name="t")


# Each case submits, on every rank, a collective named 't' whose shape,
# dtype, op, root or trailing dimensions differ between ranks.
MISMATCH_CASES = {
    "shape": lambda rank: hvd.allreduce(torch.zeros(3 + rank), name="t"),
    "dtype": lambda rank: hvd.allreduce(torch.zeros(3, dtype=torch.float32 if rank == 0 else torch.int32),
                                        name="t"),
    "op": lambda rank: hvd.allreduce(torch.zeros(3), op=hvd.Sum if rank == 0 else hvd.Max, name="t"),
    "root": lambda rank: hvd.broadcast(torch.zeros(3), root_rank=0 if rank == 0 else 1, name="t"),
    "allgather_tail": lambda rank: hvd.allgather(torch.zeros(2, 3 + rank), name="t"),
    "async_shape": lambda rank: hvd.synchronize(hvd.allreduce_async(torch.zeros(3 + rank), name="t")),
    "inplace_dtype": lambda rank: hvd.allreduce_(torch.zeros(3, dtype=torch.float64 if rank else torch.float32),
                                                 name="t"),
    "reducescatter_shape": lambda rank: hvd.reducescatter(torch.zeros(6, 1 + rank), name="t"),
    "grouped_inplace_shape": _grouped_in_place_shape,
    "grad_shape": lambda rank: hvd.allreduce(torch.zeros(3 + rank, requires_grad=True), name="t").sum().backward(),
}


def every_mismatch_raises_internal_error():
    """Returns {case: what the mismatch raised (message, classes) or what went wrong instead}."""
    hvd.init()
    rank = hvd.rank()
    report = {}
    for case, submit in MISMATCH_CASES.items():
        try:
            submit(rank)
            report[case] = "no error"
        except hvd.HorovodInternalError as e:
            report[case] = {"message": str(e), "core_class": isinstance(e, HorovodCollectiveMismatchError),
                            "runtime_error": isinstance(e, RuntimeError)}
        except Exception:
            report[case] = traceback.format_exc()
        # The engine is still usable after every mismatch.
        after = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after." + case)
        if not torch.equal(after, torch.full((2,), float(hvd.size()))):
            report[case] = "engine unusable after the mismatch: %s" % after
    return report


def duplicate_in_flight_name():
    """Rank 0 submits a second 'dup' while its first is in flight; returns what it raised and the results."""
    hvd.init()
    report = {"second": None}
    if hvd.rank() == 1:
        # Rank 1 submits late, so rank 0's first "dup" is certainly still in flight.
        time.sleep(1.0)
    first = hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
    if hvd.rank() == 0:
        try:
            hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
        except ValueError as e:
            report["second"] = str(e)
    report["first"] = hvd.synchronize(first).tolist()
    # Once finished, the name is free again.
    report["reuse"] = hvd.allreduce(torch.ones(3), name="dup", op=hvd.Sum).tolist()
    return report


def bad_input_and_use_before_init():
    """Returns {case: ["ok", message] when ValueError was raised, else what happened}, plus a final allreduce."""
    report = {}

    def record(case, fn, exc=ValueError):
        try:
            fn()
            report[case] = "no error"
        except exc as e:
            report[case] = ["ok", str(e)]
        except Exception as e:
            report[case] = "wrong class %s: %s" % (type(e).__name__, e)

    record("rank_before_init", hvd.rank)
    record("allreduce_before_init", lambda: hvd.allreduce(torch.ones(3)))
    record("broadcast_before_init", lambda: hvd.broadcast(torch.ones(3), 0))
    hvd.init()
    record("non_contiguous", lambda: hvd.allreduce(torch.zeros(4, 4)[:, 1]))
    record("non_contiguous_inplace", lambda: hvd.allreduce_(torch.zeros(4, 4).t()))
    record("unsupported_dtype", lambda: hvd.allreduce(torch.zeros(3, dtype=torch.complex64)))
    record("unsupported_dtype_allgather", lambda: hvd.allgather(torch.zeros(3, dtype=torch.complex64)))
    record("not_a_tensor", lambda: hvd.allreduce_async([1.0, 2.0]))
    record("root_out_of_range", lambda: hvd.broadcast(torch.zeros(3), root_rank=5))
    record("bad_splits", lambda: hvd.alltoall(torch.zeros(4), splits=[3, 1, 1]))
    record("unregistered_process_set", lambda: hvd.allreduce(torch.zeros(3), process_set=hvd.ProcessSet([0])))
    record("unknown_handle", lambda: hvd.synchronize(12345))
    record("op_and_average", lambda: hvd.allreduce(torch.zeros(3), average=True, op=hvd.Sum))
    record("sparse_op", lambda: hvd.sparse_allreduce_async(torch.zeros(3).to_sparse(), "s", hvd.Max))
    # After all that the engine works.
    report["after"] = hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist()
    return report


def rank_1_dies_after_warmup():
    """Rank 1 SIGKILLs itself; rank 0 returns the errors of four later allreduces (two of an in-place
    group whose argument block it kept) and how long they took."""
    hvd.init()
    hvd.allreduce(torch.ones(1), name="warmup")
    # An in-place group whose argument block is kept from here on (reused below).
    hvd.grouped_allreduce_([torch.ones(1), torch.ones(2)], name="group")
    if hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.time()
    errors = []
    for call in (lambda: hvd.allreduce(torch.ones(1), name="after_death"),
                 lambda: hvd.grouped_allreduce_([torch.ones(1), torch.ones(2)], name="group")) * 2:
        try:
            call()
            errors.append(None)
        except hvd.HorovodInternalError as e:
            errors.append(str(e))
    return {"errors": errors, "elapsed": time.time() - t0}
