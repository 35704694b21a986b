# naive.py - rank side of test_naive_engine.py: under MXNET_ENGINE_TYPE=NaiveEngine
# (MXNet's synchronous engine) every collective runs at the call, a mismatch
# is an MXNetError raised by the call itself on every rank, and a
# DistributedTrainer (of bfloat16 parameters) trains as on the threaded engine.
"""Rank programs for test_naive_engine.py."""

import mxnet as mx
from mxnet.base import MXNetError

import horovod.mxnet as hvd
from horovod.mxnet import _engine_bridge
from rank_programs import collectives, errors, training


def everything_works_on_naive_engine():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    report = {"naive": _engine_bridge.naive_engine()}
    # The call itself raises (NaiveEngine drops an operation's error, so hvd raises it at the push).
    try:
        hvd.allreduce(mx.nd.zeros((3 + rank,)), name="at_call")
        report["raised_at_call"] = None
    except MXNetError as e:
        report["raised_at_call"] = str(e)
    report["collectives"] = collectives.every_collective_every_dtype()
    report["mismatches"] = errors.every_mismatch_raises_mxnet_error()
    report["trainer"] = training.gluon_trainer_matches_one_process(num_groups=1, dtype="bfloat16")
    report["size"] = size
    return report
