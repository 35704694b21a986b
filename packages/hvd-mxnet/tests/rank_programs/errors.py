# errors.py - rank side of test_errors.py: collectives whose arguments differ
# between ranks fail on every rank as MXNetError (from the next wait, for
# the operations pushed on MXNet's engine), and the engine stays usable;
# a peer that dies fails the survivors' pending collectives.
"""Rank programs for test_errors.py."""

import os
import time

import mxnet as mx
from mxnet.base import MXNetError

import horovod.mxnet as hvd
from horovod.mxnet import _engine_bridge

MISMATCH_CASES = {
    "allreduce_shape": lambda rank: hvd.allreduce(mx.nd.zeros((3 + rank,)), name="t"),
    "allreduce_dtype": lambda rank: hvd.allreduce(mx.nd.zeros((3,), dtype="float32" if rank == 0 else "int32"),
                                                  name="t"),
    "allreduce_op": lambda rank: hvd.allreduce(mx.nd.zeros((3,)), op=hvd.Sum if rank == 0 else hvd.Max, name="t"),
    "allreduce_inplace_shape": lambda rank: hvd.allreduce_(mx.nd.zeros((2, 1 + rank)), name="t"),
    "grouped_allreduce_shape": lambda rank: hvd.grouped_allreduce([mx.nd.zeros((2,)), mx.nd.zeros((1 + rank,))],
                                                                  name="t")[1],
    "broadcast_root": lambda rank: hvd.broadcast(mx.nd.zeros((3,)), root_rank=0 if rank == 0 else 1, name="t"),
    "allgather_tail": lambda rank: hvd.allgather(mx.nd.zeros((2, 3 + rank)), name="t"),
    "reducescatter_shape": lambda rank: hvd.reducescatter(mx.nd.zeros((6, 1 + rank)), name="t"),
    # The input's writer failed: MXNet skips the allgather and raises that failure, no hang.
    "allgather_of_failed_output": lambda rank: hvd.allgather(hvd.allreduce(mx.nd.zeros((2 + rank,)), name="chain"),
                                                             name="t"),
}


def every_mismatch_raises_mxnet_error():
    """Returns {case: the error's class and message, or what happened instead}, then a check that all still works."""
    hvd.init()
    rank = hvd.rank()
    report = {}
    for case, submit in MISMATCH_CASES.items():
        try:
            out = submit(rank)
            out.asnumpy()
            report[case] = "no error"
        except MXNetError as e:
            report[case] = {"class": type(e).__name__, "message": str(e)}
    report["after"] = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="after").asnumpy().tolist()
    report["pending"] = _engine_bridge.pending_count()
    return report


def dead_peer_fails_the_survivors():
    """The last rank exits while the others wait on an allreduce it never submits."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if rank == size - 1:
        time.sleep(0.5)
        os._exit(17)
    out = hvd.allreduce(mx.nd.ones((4,)), name="never")
    start = time.monotonic()
    try:
        out.asnumpy()
        return {"raised": None}
    except MXNetError as e:
        return {"raised": str(e), "seconds": time.monotonic() - start}
