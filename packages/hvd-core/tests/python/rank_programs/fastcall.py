# fastcall.py - rank side of test_fastcall.py: the synchronous numpy calls
# that the C accelerator (_hvd_fastcall) can take, over every dtype and the
# arrays it must leave to the ctypes path (strided, read-only, empty), with
# a count of the calls that went through it.
"""Rank programs for test_fastcall.py."""

import horovod.common as hvd
from horovod.common import engine_calls
from rank_programs.collectives import DTYPES, make


class _CountingAccelerator:
    """Stands in for the loaded module and counts the calls it runs."""

    def __init__(self, module):
        self.module, self.calls = module, 0

    def __getattr__(self, name):
        function = getattr(self.module, name)

        def counted(*args):
            self.calls += 1
            return function(*args)
        return counted


def _outcome(call):
    """(the result's dtype, shape, flags and bytes, or the exception's class and message)."""
    try:
        out = call()
    except Exception as e:  # the same error either way is part of what is compared
        return ["error", type(e).__name__, str(e)]
    return ["ok", str(out.dtype), list(out.shape), bool(out.flags.writeable), bool(out.flags.c_contiguous),
            out.tobytes().hex()]


def every_call_either_way(rounds=2):
    """Every dtype through allreduce, allreduce_, broadcast, broadcast_,
    allgather and reducescatter, each call made `rounds` times under one
    name (so the later ones hit the per-call-site block cache), on plain,
    strided, read-only and empty arrays. Returns, per call, whether it went
    through the accelerator and what it gave."""
    hvd.init()
    rank = hvd.rank()
    loaded = engine_calls.fastcall()
    counter = None
    if loaded:
        counter = engine_calls._fast = _CountingAccelerator(loaded)
    outcomes = []
    for dtype_name in DTYPES:
        for kind in ("plain", "strided", "read_only", "empty"):
            base = make(rank, (0,) if kind == "empty" else (6, 4), dtype_name)
            for call in range(rounds):
                x = base.copy()
                if kind == "strided":
                    x = make(rank + call, (12, 4), dtype_name)[::2]
                elif kind == "read_only":
                    x.flags.writeable = False
                tag = "%s.%s" % (dtype_name, kind)
                op = hvd.Max if dtype_name == "bool" else hvd.Sum
                cases = {
                    "allreduce": lambda: hvd.allreduce(x, op=op, name="ar." + tag),
                    "allreduce_": lambda: hvd.allreduce_(x.copy() if kind == "plain" else x, op=op,
                                                         name="ar_." + tag),
                    "broadcast": lambda: hvd.broadcast(x, 1, name="bc." + tag),
                    "broadcast_": lambda: hvd.broadcast_(x.copy() if kind == "plain" else x, 1,
                                                         name="bc_." + tag),
                    "allgather": lambda: hvd.allgather(x, name="ag." + tag),
                }
                if dtype_name != "bool":
                    cases["reducescatter"] = lambda: hvd.reducescatter(x, op=hvd.Sum, name="rs." + tag)
                for label, function in cases.items():
                    before = counter.calls if counter else 0
                    result = _outcome(function)
                    accelerated = (counter.calls if counter else 0) > before
                    outcomes.append([label, tag, call, accelerated] + result)
    hvd.shutdown()
    return {"accelerator_loaded": bool(loaded), "outcomes": outcomes}
