# bad_input.py - rank programs of test_bad_input.py: input that used to write
# into immutable memory, be silently changed, or fail with an unrelated error.
import numpy as np

import horovod.common as hvd


def _error_of(call):
    try:
        call()
    except Exception as e:  # the test checks the class and the message
        return [type(e).__name__, str(e)]
    return None


def refusals_of_arrays_and_roots():
    hvd.init()
    read_only = np.ones(4, np.float32)
    read_only.setflags(write=False)
    return {
        "allreduce_ into read-only": _error_of(lambda: hvd.allreduce_(read_only, name="ro.allreduce")),
        "broadcast_ into read-only": _error_of(lambda: hvd.broadcast_(read_only, 0, name="ro.broadcast")),
        "grouped_allreduce_ into read-only": _error_of(
            lambda: hvd.grouped_allreduce_([np.ones(2, np.float32), read_only], name="ro.grouped")),
        "read-only unchanged": read_only.tolist(),
        "read-only input is fine": hvd.allreduce(read_only, op=hvd.Sum, name="ro.input").tolist(),
        "big-endian": _error_of(lambda: hvd.allreduce(np.ones(4, dtype=">f4"), name="be")),
        "root beyond 32 bits": _error_of(lambda: hvd.broadcast(np.ones(2, np.float32), 2**40, name="root")),
    }


def zero_scale_factors():
    hvd.init()
    x = np.full(4, hvd.rank() + 1.0, np.float32)
    return {
        "prescale 0": hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.0, name="pre0").tolist(),
        "postscale 0": hvd.allreduce(x, op=hvd.Sum, postscale_factor=0.0, name="post0").tolist(),
        "reducescatter postscale 0": hvd.reducescatter(np.ones((hvd.size(), 2), np.float32), op=hvd.Sum,
                                                       postscale_factor=0.0, name="rs0").tolist(),
        "unscaled": hvd.allreduce(x, op=hvd.Sum, name="plain").tolist(),
    }


def init_error():
    try:
        hvd.init()
    except Exception as e:
        return [type(e).__name__, str(e)]
    hvd.shutdown()
    return None
