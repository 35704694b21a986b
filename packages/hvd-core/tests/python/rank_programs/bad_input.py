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
        "name of 70,000 bytes": _error_of(lambda: hvd.allreduce(np.ones(2, np.float32), name="n" * 70000)),
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


def use_in_a_forked_child():
    import json
    import os
    import sys
    hvd.init()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        seen = {
            "allreduce": _error_of(lambda: hvd.allreduce(np.ones(2), name="from.child")),
            "rank": _error_of(hvd.rank),
            "init": _error_of(hvd.init),
            "is_initialized": hvd.is_initialized(),
        }
        with os.fdopen(write_end, "w") as out:
            json.dump(seen, out)
        sys.exit(0)  # a normal exit: atexit handlers and static destructors run
    os.close(write_end)
    with os.fdopen(read_end) as child_out:
        child = json.load(child_out)
    _, status = os.waitpid(pid, 0)
    # The parent's job is untouched by what the child tried.
    total = hvd.allreduce(np.ones(2) * (hvd.rank() + 1), op=hvd.Sum, name="after.fork").tolist()
    return {"child": child, "child_exit": status, "parent_allreduce": total}
