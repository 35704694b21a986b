# fastcall.py - rank side of test_fastcall.py: the synchronous numpy calls
# that the C accelerator (_hvd_fastcall) can take, over every dtype and the
# arrays it must leave to the ctypes path (strided, read-only, empty), with
# a count of the calls that went through it.
"""Rank programs for test_fastcall.py."""

import os

import numpy as np

import horovod.common as hvd
from horovod.common import engine_calls
from rank_programs.collectives import DTYPES, close, dt, make


class _CountingAccelerator:
    """Stands in for the loaded module and counts the calls it runs, the
    run_cached calls that found their block (did not return None), and of
    those the ones that handed over the engine's own result memory."""

    def __init__(self, module):
        self.module, self.calls, self.table_hits, self.handovers = module, 0, 0, 0

    def __getattr__(self, name):
        function = getattr(self.module, name)

        def counted(*args):
            self.calls += 1
            outcome = function(*args)
            if name == "run_cached" and outcome is not None:
                self.table_hits += 1
                # The engine's memory comes back under an array made in C
                # (its base owns that memory), or as its address.
                self.handovers += type(outcome) is int or getattr(outcome, "base", None) is not None
            return outcome
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


class _Subclass(np.ndarray):
    pass


def table_tells_calls_apart(repeats=3):
    """Calls that differ in one thing only (op, a factor, shape, dtype, name,
    in place or not, root rank), each made `repeats` times in a row, so that
    all but the first find their block in the accelerator's table. Returns,
    per call, the result against the one numpy computes, and the table hits
    counted over each case."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    engine_calls._fast = counter = _CountingAccelerator(engine_calls.fastcall())
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + rank
    total = sum(np.arange(6, dtype=np.float64).reshape(2, 3) + r for r in range(size)).astype(np.float32)
    root1 = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    rows = np.full((rank + 1, 2), rank, np.float32)
    gathered = np.concatenate([np.full((r + 1, 2), r, np.float32) for r in range(size)])
    big = np.full((4096 * (rank + 1), 4), rank, np.float32)  # 64-128 KiB per rank
    big_gathered = np.concatenate([np.full((4096 * (r + 1), 4), r, np.float32) for r in range(size)])
    cases = [
        ("sum", lambda: hvd.allreduce(x, op=hvd.Sum, name="name.k"), total),
        # Right after "sum", whose block it finds (a later case might evict it).
        ("equal name, another string", lambda: hvd.allreduce(x, op=hvd.Sum, name="".join(["name.", "k"])), total),
        ("average", lambda: hvd.allreduce(x, op=hvd.Average, name="name.k"), total / size),
        ("prescale", lambda: hvd.allreduce(x, op=hvd.Sum, name="name.k", prescale_factor=2.0), 2 * total),
        ("postscale", lambda: hvd.allreduce(x, op=hvd.Sum, name="name.k", postscale_factor=0.5), total / 2),
        ("shape", lambda: hvd.allreduce(x.reshape(3, 2), op=hvd.Sum, name="name.k"), total.reshape(3, 2)),
        ("dtype", lambda: hvd.allreduce(x.astype(np.float64), op=hvd.Sum, name="name.k"), total.astype(np.float64)),
        ("other name", lambda: hvd.allreduce(x, op=hvd.Sum, name="name.k2"), total),
        ("no name", lambda: hvd.allreduce(x, op=hvd.Sum), total),
        ("in place", lambda: hvd.allreduce_(x.copy(), op=hvd.Sum, name="name.k"), total),
        ("broadcast root 0", lambda: hvd.broadcast(x, 0, name="name.k"), root1 - 1),
        ("broadcast root 1", lambda: hvd.broadcast(x, 1, name="name.k"), root1),
        ("broadcast_ root 1", lambda: hvd.broadcast_(x.copy(), 1, name="name.k"), root1),
        ("subclass", lambda: hvd.allreduce(x.view(_Subclass), op=hvd.Sum, name="name.k"), total),
        # Rank r gives r + 1 rows: the result's shape comes from the engine.
        ("allgather", lambda: hvd.allgather(rows, name="name.k"), gathered),
        ("allgather, another dtype", lambda: hvd.allgather(rows.astype(np.int64), name="name.k"),
         gathered.astype(np.int64)),
        ("allgather above the copy limit", lambda: hvd.allgather(big, name="name.k"), big_gathered),
        ("reducescatter", lambda: hvd.reducescatter(x, op=hvd.Sum, name="name.k"), np.array_split(total, size)[rank]),
        ("reducescatter average", lambda: hvd.reducescatter(x, op=hvd.Average, name="name.k"),
         np.array_split(total, size)[rank] / size),
    ]
    outcomes = []
    for label, call, expected in cases:
        before, handovers = counter.table_hits, counter.handovers
        results = [call() for _ in range(repeats)]
        same = all(type(r) in (np.ndarray, _Subclass) and r.dtype == expected.dtype and r.shape == expected.shape
                   and r.flags.writeable and np.array_equal(r, expected) for r in results)
        outcomes.append([label, bool(same), counter.table_hits - before])
        if counter.handovers > handovers:
            outcomes[-1][0] += " (handed over)"
    # More distinct calls than the table has places: evicted blocks are made again.
    before = counter.table_hits
    right = all(np.array_equal(hvd.allreduce(x + i, op=hvd.Sum, name="n%d" % i), total + size * i)
                for i in range(200) for _ in range(2))
    outcomes.append(["200 names", bool(right), counter.table_hits - before])
    # The input of an out-of-place call is left as it was.
    outcomes.append(["input untouched", bool(np.array_equal(x, np.arange(6).reshape(2, 3) + rank)), 0])
    hvd.shutdown()
    return outcomes


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def table_hands_over_large_results(calls=300):
    """Allgathers and reducescatters above the table's copy limit, repeated
    so that the table runs them: their results come back as arrays over the
    engine's memory, made in C. Each must be the gathered (reduced) data with
    the input's dtype, the right shape, writable and C-contiguous; writing
    into one must not touch the next; a view must keep its memory while
    later calls of the same size reuse freed blocks; `calls` results dropped
    at once must not pile up (resident memory); one kept past shutdown must
    still read right, and be freed after it without harm. Returns the
    failures and the handovers counted."""
    import gc

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    engine_calls._fast = counter = _CountingAccelerator(engine_calls.fastcall())
    failures = []
    kept_views = []
    shapes = {"float32": (64, 16, 32), "float16": (96, 512), "int8": (300000,), "bfloat16": (128, 300)}
    for name, shape in shapes.items():
        if name not in DTYPES:  # bfloat16 without ml_dtypes
            continue
        mine = make(rank, shape, name)
        want = np.concatenate([make(r, shape, name) for r in range(size)])
        results = [hvd.allgather(mine, name="handover.%s" % name) for _ in range(3)]
        for i, out in enumerate(results):
            if (out.dtype != dt(name) or out.shape != want.shape or not out.flags.writeable
                    or not out.flags.c_contiguous or not close(out, want, name)):
                failures.append(["allgather", name, i, str(out.dtype), list(out.shape), bool(out.flags.writeable)])
        results[1][...] = 0
        if not close(results[2], want, name):
            failures.append(["writing one result changed another", name])
        kept_views.append((results[2][1:], want[1:], name))
        del results
    total = sum(make(r, (4096 * size, 8), "float64") for r in range(size))
    reduced = [hvd.reducescatter(make(rank, (4096 * size, 8), "float64"), op=hvd.Sum, name="handover.rs")
               for _ in range(3)]
    for out in reduced:
        if out.shape != (4096, 8) or not out.flags.writeable or not close(out, total[4096 * rank:4096 * (rank + 1)],
                                                                           "float64"):
            failures.append(["reducescatter", list(out.shape)])
    del reduced
    gc.collect()
    # 1 MiB results, each dropped at once.
    mine = make(rank, (65536 // size, 4), "float32")
    hvd.allgather(mine, name="handover.drop")
    before = _resident_bytes()
    for _ in range(calls):
        hvd.allgather(mine, name="handover.drop")
    grown = _resident_bytes() - before
    if grown > calls * (1 << 20) // 4:
        failures.append(["resident memory grew", grown])
    for view, want, name in kept_views:
        if not close(view, want, name):
            failures.append(["view lost its memory", name])
    last = hvd.allgather(mine, name="handover.drop")
    hvd.shutdown()
    want = np.concatenate([make(r, (65536 // size, 4), "float32") for r in range(size)])
    if not close(last, want, "float32"):
        failures.append(["result changed after shutdown"])
    del last, kept_views
    gc.collect()
    return failures, counter.handovers
