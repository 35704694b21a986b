# autotune.py - rank side of test_autotune.py: a training-like loop of named
# allreduces while HOROVOD_AUTOTUNE changes the coordinator's settings.
"""Rank programs for test_autotune.py."""

import numpy as np

import horovod.common as hvd
from horovod.common import testing


def steps_of_four_gradients(steps, elements=1000):
    """Runs `steps` steps of four asynchronous allreduces (of 1, 2, 3 and 4
    times `elements` floats); reports how many steps gave the exact sum on
    this rank."""
    hvd.init()
    exact = 0
    for step in range(steps):
        grads = [np.full(elements * (i + 1), hvd.rank() + step + i, np.float32) for i in range(4)]
        handles = [hvd.allreduce_async(g, op=hvd.Sum, name="grad.%d" % i) for i, g in enumerate(grads)]
        results = [hvd.synchronize(h) for h in handles]
        expected = [sum(r + step + i for r in range(hvd.size())) for i in range(4)]
        exact += all(np.all(res == want) for res, want in zip(results, expected))
    testing.report(exact)
    hvd.shutdown()


def gradient_bucket_answers():
    """Asks for a tuned gradient bucket once, as an optimizer does after a
    step (4 MiB buckets over 1 MiB of gradients), then with a negative size;
    reports the size, whether it would ask again, and the error."""
    import ctypes

    from horovod.common import c_api
    from horovod.common.autotune import GradientBucketTuning
    hvd.init()
    tuning = GradientBucketTuning(4 << 20, 1 << 20, hvd.global_process_set)
    bucket = tuning.after_step()
    try:
        c_api.check(c_api.lib().hvd_autotune_gradient_bucket(-1, 0, ctypes.byref(ctypes.c_int64()),
                                                             ctypes.byref(ctypes.c_int32())))
        error = None
    except Exception as e:
        error = [type(e).__name__, str(e)]
    testing.report({"bucket": bucket, "asks_again": tuning._asking, "error": error})
    hvd.shutdown()
