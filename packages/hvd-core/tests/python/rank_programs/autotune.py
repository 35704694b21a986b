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
