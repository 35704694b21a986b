# gpu_support.py - rank side of test_gpu_support.py: what hvd-core reports
# about its CUDA plugin and NCCL, and what enqueueing a non-CPU tensor gives.
"""Rank programs for test_gpu_support.py."""

import numpy as np

import horovod.common as hvd
from horovod.common import c_api, engine_calls


def gpu_info():
    return c_api.gpu_info()


def enqueue_on_device(device_type, name):
    """Enqueues a 4-float allreduce described as living on DLPack `device_type`; returns the error, if any."""
    hvd.init()
    desc = engine_calls.TensorDesc(0x10000, (4,), c_api.kDLFloat, 32, device_type=device_type, device_id=0)
    try:
        engine_calls.enqueue(c_api.ALLREDUCE, [desc], [name.encode()])
        return {"error": None}
    except Exception as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}


def allreduce_after_init():
    hvd.init()
    return hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum).tolist()
