# autotune.py - the bindings' side of HOROVOD_AUTOTUNE: the gradient bucket
# size. The engine's tuner (on rank 0) tries bucket sizes around the one an
# optimizer was configured with. The optimizer asks between steps, and rank
# 0's answer reaches every rank through a collective: each rank's engine
# would hear of a new setting at a different moment, and ranks that bucket
# differently in the same step would wait on each other's names for ever.
# The collective is a sum to which only rank 0 adds anything, not a
# broadcast: a rank that ran out of data and called hvd.join() takes part in
# allreduces (with zeros) but in nothing else.
"""HOROVOD_AUTOTUNE's gradient bucket size, shared by the bindings' optimizers."""

import ctypes

import numpy as np

from horovod.common import c_api
from horovod.common.basics import Sum
from horovod.common.collectives import allreduce

_OFF, _TUNING = 0, 1  # hvd_autotune_gradient_bucket's states (2: done)
_COLLECTIVE_NAME = "horovod.autotune.gradient_bucket"


class GradientBucketTuning:
    """The bucket size an optimizer uses while HOROVOD_AUTOTUNE may change it.

    `configured_bytes` is the size the optimizer was configured with
    (HOROVOD_GRADIENT_BUCKET_MB), `total_bytes` how many bytes of gradients it
    reduces a step. Every rank of `process_set` calls `after_step()` once after
    each step's reductions have completed; it returns the bucket size for the
    next step, the same on every rank. Only an optimizer of the global process
    set is tuned (the tuner lives on its rank 0), and only with buckets on.
    """

    def __init__(self, configured_bytes, total_bytes, process_set):
        self.configured_bytes = configured_bytes
        self.total_bytes = total_bytes
        self._tunable = configured_bytes > 0 and process_set.process_set_id == 0
        self._process_set = process_set
        self.restart()

    def restart(self):
        """Back to the configured size, asking again: the engine was replaced
        (an elastic reset), and its tuner starts over."""
        self.bytes = self.configured_bytes
        self._asking = self._tunable

    def after_step(self):
        if not self._asking:
            return self.bytes
        proposed, state = ctypes.c_int64(), ctypes.c_int32()
        c_api.check(c_api.lib().hvd_autotune_gradient_bucket(self.configured_bytes, self.total_bytes,
                                                             ctypes.byref(proposed), ctypes.byref(state)))
        if state.value == _OFF:  # the same on every rank: HOROVOD_AUTOTUNE must agree
            self._asking = False
            return self.bytes
        # Rank 0 adds its answer (the size plus one, so that a sum of zeros
        # means it has joined); the others add zeros.
        mine = [proposed.value + 1, state.value] if self._process_set.rank() == 0 else [0, 0]
        agreed = allreduce(np.array(mine, dtype=np.int64), op=Sum, name=_COLLECTIVE_NAME)
        if agreed[0] == 0:  # rank 0 joined: no answer will come any more
            self._asking = False
            return self.bytes
        self.bytes = int(agreed[0]) - 1
        self._asking = int(agreed[1]) == _TUNING
        return self.bytes
