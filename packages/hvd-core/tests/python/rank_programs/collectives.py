# collectives.py - rank side of test_collectives.py: every collective x dtype
# x op on deterministic per-rank inputs, each rank checking its result
# against a reference it computes from the inputs of all ranks.
"""Rank programs for test_collectives.py."""

import importlib.util
import os
import time

import numpy as np

import horovod.common as hvd

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64", "bool"]
if importlib.util.find_spec("ml_dtypes") is not None:
    DTYPES.append("bfloat16")


def dt(name):
    if name == "bfloat16":
        # Imported by the programs that use it (its import costs a process
        # about 0.75 s of CPU), after horovod.common, as user code may.
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def make(r, shape, name):
    """Rank r's deterministic input of `shape` and dtype `name`."""
    n = int(np.prod(shape))
    base = (np.arange(n) * 7 + r * 3) % 11
    if name == "bool":
        return ((base + r) % 3 == 0).reshape(shape)
    if name in ("float16", "bfloat16", "float32", "float64"):
        return ((base - 5) * 0.25).astype(dt(name)).reshape(shape)
    if name.startswith("uint"):
        return (base % 4).astype(dt(name)).reshape(shape)
    return ((base % 5) - 2).astype(dt(name)).reshape(shape)


def close(a, b, name):
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        return False
    if name in ("float16", "bfloat16"):
        return np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-2, atol=1e-2)
    if name in ("float32", "float64"):
        return np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-5, atol=1e-6)
    return np.array_equal(a, b)


def reference(inputs, opname, name):
    """What an allreduce of every rank's `inputs` gives: bools reduce
    logically, integers average with truncation, all in float64 first."""
    if name == "bool":
        logical = np.logical_and if opname in ("Min", "Product") else np.logical_or
        return logical.reduce(inputs)
    wide = np.stack([x.astype(np.float64) for x in inputs])
    if opname == "Average":
        ref = wide.sum(0) / len(inputs)
    else:
        ref = {"Sum": np.sum, "Min": np.min, "Max": np.max, "Product": np.prod}[opname](wide, 0)
    if opname == "Average" and not name.startswith("float") and name != "bfloat16":
        ref = np.trunc(ref)
    return ref.astype(dt(name))


def allreduce_every_dtype_and_op():
    """Returns the [dtype, op, shape] cases whose result differs from the reference."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product, "Average": hvd.Average}
    for name in DTYPES:
        for shape in [(1,), (7, 3), (1000,), (33, 31)]:
            inputs = [make(r, shape, name) for r in range(size)]
            for opname, op in ops.items():
                if name == "bool" and opname in ("Average",):
                    continue
                if opname == "Product" and name not in ("bool",) and shape == (33, 31):
                    continue
                ref = reference(inputs, opname, name)
                out = hvd.allreduce(inputs[rank], op=op, name="%s.%s.%s" % (name, opname, shape))
                if out.dtype != dt(name) or not close(out, ref, name):
                    failures.append([name, opname, str(shape)])
    return failures


def large_allreduce_every_dtype_and_op():
    """Allreduces of 2 MiB (on one host: the shm transport's single-copy
    reduce-scatter + allgather, or its slots), every dtype and op, in place
    and out of place in turn, with an element count the ranks do not divide
    evenly, plus scale factors. Returns (failures, {case: sha256 of the
    result}) so the test can check that every rank holds the same bytes."""
    import hashlib

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures, digests = [], {}
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product, "Average": hvd.Average}
    for name in DTYPES:
        count = (2 << 20) // dt(name).itemsize + 7
        inputs = [make(r, (count,), name) for r in range(size)]
        for opname, op in ops.items():
            if name == "bool" and opname == "Average":
                continue
            ref = reference(inputs, opname, name)
            in_place = len(digests) % 2 == 1
            case = "%s.%s.%s" % (name, opname, "in_place" if in_place else "out_of_place")
            if in_place:
                out = inputs[rank].copy()
                hvd.allreduce_(out, op=op, name="large." + case)
            else:
                out = hvd.allreduce(inputs[rank], op=op, name="large." + case)
            if out.dtype != dt(name) or not close(out, ref, name):
                failures.append(case)
            digests[case] = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()
    # The executor prescales the input into the output; the transport scales
    # each share of the result where it reduces it.
    x = make(rank, ((2 << 20) // 4 + 7,), "float32")
    total = np.sum([make(r, x.shape, "float32").astype(np.float64) for r in range(size)], 0)
    scaled = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="large.scaled")
    if not close(scaled, total * 1.5, "float32"):
        failures.append("float32.Sum.scaled")
    return failures, digests


def kept_results_survive_shutdown(kept):
    """Checks that engine-allocated results still held ((result, expected,
    dtype name) triples) kept their values through later calls and through
    hvd.shutdown(), which empties the pool of freed blocks only; the results
    can be freed after it. Returns the failures."""
    failures = []
    for out, want, name in kept:
        if not close(out, want, name):
            failures.append(["kept result changed", name])
    hvd.shutdown()
    for out, want, name in kept:
        if not close(out, want, name):
            failures.append(["result changed by shutdown", name])
    return failures


def large_allreduce_results_come_from_the_pool():
    """Out-of-place allreduces of ENGINE_ALLOCATED_ALLREDUCE_BYTES and more,
    whose results the core allocates (from its pool of reused blocks) and
    numpy wraps: dtypes and ops against the reference, the input left alone,
    results writable and independent of later calls that reuse freed blocks,
    scale factors, the asynchronous form, and one just below the size that
    gives the core the allocation. Returns the failures."""
    import gc

    from horovod.common.engine_calls import ENGINE_ALLOCATED_ALLREDUCE_BYTES as large

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Average": hvd.Average}
    kept = []
    for name in [n for n in DTYPES if n in ("bool", "int8", "int64", "float16", "bfloat16", "float32", "float64")]:
        shape = (1025, large // 1024 // dt(name).itemsize + 3)  # above the size, not a power of two
        inputs = [make(r, shape, name) for r in range(size)]
        for opname, op in ops.items():
            if name == "bool" and opname == "Average":
                continue
            ref = reference(inputs, opname, name)
            mine = inputs[rank].copy()
            out = hvd.allreduce(mine, op=op, name="big.%s.%s" % (name, opname))
            if out.dtype != dt(name) or not out.flags.writeable or not out.flags.c_contiguous:
                failures.append(["flags", name, opname, str(out.dtype), bool(out.flags.writeable)])
            if not close(out, ref, name):
                failures.append(["value", name, opname])
            if not np.array_equal(mine, inputs[rank]) or np.shares_memory(out, mine):
                failures.append(["input touched or shared", name, opname])
            if opname == "Sum":
                kept.append((out, ref, name))
    # A freed result's block is handed out again; scribbling on a result or
    # freeing it changes no other result.
    x = make(rank, (large // 4096, 1024), "float32")
    total = sum(make(r, x.shape, "float32").astype(np.float64) for r in range(size)).astype(np.float32)
    first = hvd.allreduce(x, op=hvd.Sum, name="reuse")
    address = first.ctypes.data
    first[:] = -1.0
    del first
    gc.collect()
    # The block is the pool's, not malloc's: an array allocated now does not
    # take it, the next result does.
    blocker = np.full_like(x, 7.0)
    again = hvd.allreduce(x, op=hvd.Sum, name="reuse")
    if np.shares_memory(blocker, again) or not np.all(blocker == 7.0):
        failures.append(["result and a numpy array share memory"])
    if not close(again, total, "float32"):
        failures.append(["after scribble"])
    if os.environ.get("HVD_RESULT_POOL_BYTES") != "0" and again.ctypes.data != address:
        failures.append(["freed block not reused"])
    view = again[:3]
    del again
    gc.collect()
    other = hvd.allreduce(x, op=hvd.Sum, name="reuse")
    if other.ctypes.data == view.ctypes.data or not close(view, total[:3], "float32"):
        failures.append(["block of a live view handed out again"])
    scaled = hvd.allreduce(x, op=hvd.Average, prescale_factor=0.5, postscale_factor=4.0, name="scaled")
    if not close(scaled, total * 2.0 / size, "float32"):
        failures.append(["scale factors"])
    handles = [hvd.allreduce_async(x * (i + 1), op=hvd.Sum, name="big.async.%d" % i) for i in range(3)]
    for i, h in enumerate(handles):
        if not close(hvd.synchronize(h), total * (i + 1), "float32"):
            failures.append(["async", i])
    small = make(rank, (large // 4 - 1,), "float32")  # 4 bytes short: a new array
    small_total = sum(make(r, small.shape, "float32").astype(np.float64) for r in range(size))
    if not close(hvd.allreduce(small, op=hvd.Sum, name="small"), small_total, "float32"):
        failures.append(["below the pool size"])
    failures += kept_results_survive_shutdown(kept)
    return failures


def allreduce_scale_factors_inplace_and_async():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    x = np.arange(10, dtype=np.float32) + rank
    total = sum(np.arange(10, dtype=np.float32) + r for r in range(size))
    out = {}
    out["avg"] = np.allclose(hvd.allreduce(x), total / size)
    out["scaled"] = np.allclose(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0),
                                total * 1.5)
    out["avg_scaled"] = np.allclose(hvd.allreduce(x, op=hvd.Average, postscale_factor=2.0), total / size * 2)
    y = x.copy()
    r = hvd.allreduce_(y, op=hvd.Sum)
    out["inplace"] = r is y and np.allclose(y, total)
    out["input_untouched"] = np.array_equal(x, np.arange(10, dtype=np.float32) + rank)
    handles = [hvd.allreduce_async(x * i, name="async.%d" % i, op=hvd.Sum) for i in range(20)]
    out["async_many"] = all(np.allclose(hvd.synchronize(h), total * i) for i, h in enumerate(handles))
    h = hvd.allreduce_async(x, op=hvd.Sum, name="polled")
    while not hvd.poll(h):
        time.sleep(0.001)
    out["poll"] = np.allclose(hvd.synchronize(h), total)
    out["deprecated_average"] = np.allclose(hvd.allreduce(x, average=False), total)
    return {k: bool(v) for k, v in out.items()}


def grouped_allreduce_and_fusion_of_many_small_tensors():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    tensors = [np.full((i + 1, 3), rank + i, np.float32) for i in range(50)]
    refs = [np.full((i + 1, 3), sum(r + i for r in range(size)), np.float32) for i in range(50)]
    out = {}
    res = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="grp")
    out["grouped"] = all(np.allclose(a, b) for a, b in zip(res, refs))
    copies = [t.copy() for t in tensors]
    hvd.grouped_allreduce_(copies, op=hvd.Sum)
    out["grouped_inplace"] = all(np.allclose(a, b) for a, b in zip(copies, refs))
    hs = [hvd.allreduce_async(t, op=hvd.Sum, name="fuse.%d" % i) for i, t in enumerate(tensors)]
    out["fused_async"] = all(np.allclose(hvd.synchronize(h), b) for h, b in zip(hs, refs))
    mixed = [np.full(4, rank, np.int32), np.full(5, rank, np.float64)]
    out["mixed_dtypes"] = [hvd.allreduce(m, op=hvd.Sum).tolist() for m in mixed] == \
        [[sum(range(size))] * 4, [float(sum(range(size)))] * 5]
    return out


def _grouped_allreduces_every_dtype_and_op(extra_pieces, scaled_counts, tag):
    """Grouped allreduces of every dtype and op, in place and out of place in
    turn: tensors of odd sizes that the shm transport's 512 KiB pieces cut
    through, empty ones among them, one larger than two pieces, and
    `extra_pieces` pieces more; then scale factors (`scaled_counts` float32
    tensors), and a rank that joined (it takes part with zeros). Returns the
    failures."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product, "Average": hvd.Average}
    for name in DTYPES:
        piece = (512 << 10) // dt(name).itemsize
        counts = [piece // 3 + 1, 0, piece + 5, 17, 0, 2 * piece + 3, piece // 2 - 1]
        counts += [int(extra_pieces * piece)] if extra_pieces else []
        inputs = [[make(r, (c,), name) for c in counts] for r in range(size)]
        for k, (opname, op) in enumerate(ops.items()):
            if name == "bool" and opname == "Average":
                continue
            refs = [reference([inputs[r][i] for r in range(size)], opname, name) for i in range(len(counts))]
            case = "%s.%s" % (name, opname)
            if k % 2:
                outs = [x.copy() for x in inputs[rank]]
                hvd.grouped_allreduce_(outs, op=op, name="%s.%s" % (tag, case))
            else:
                outs = hvd.grouped_allreduce(inputs[rank], op=op, name="%s.%s" % (tag, case))
            for i, (out, ref) in enumerate(zip(outs, refs)):
                if out.dtype != dt(name) or not close(out, ref, name):
                    failures.append("%s[%d]" % (case, i))
    xs = [make(rank, (c,), "float32") for c in scaled_counts]
    totals = [np.sum([make(r, (c,), "float32").astype(np.float64) for r in range(size)], 0) for c in scaled_counts]
    scaled = hvd.grouped_allreduce(xs, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name=tag + ".scaled")
    failures += ["scaled[%d]" % i for i, (a, b) in enumerate(zip(scaled, totals)) if not close(a, b * 1.5, "float32")]
    # The last rank joins; the others' sum is all there is.
    if rank == size - 1:
        hvd.join()
    else:
        kept = hvd.grouped_allreduce(xs, op=hvd.Sum, name=tag + ".joined")
        partial = [np.sum([make(r, (c,), "float32").astype(np.float64) for r in range(size - 1)], 0)
                   for c in scaled_counts]
        failures += ["joined[%d]" % i for i, (a, b) in enumerate(zip(kept, partial)) if not close(a, b, "float32")]
        hvd.join()
    return failures


def grouped_allreduce_across_pieces_every_dtype_and_op():
    """Grouped allreduces just under 2 MiB: reduced in 512 KiB pieces."""
    return _grouped_allreduces_every_dtype_and_op(0, [300001, 7, 200003], "pieces")


def grouped_allreduce_in_the_single_copy_window_every_dtype_and_op():
    """Grouped allreduces of 2-3 MiB: in one piece, which the single copy
    reads where the tensors lie (or the slots take whole)."""
    return _grouped_allreduces_every_dtype_and_op(1.5, [400001, 7, 200003], "whole")


def grouped_allreduce_of_three_pieces():
    """Grouped allreduces of 350000 floats, three 512 KiB pieces: one reduced
    where the tensors lie, one prescaled (packed into the fusion buffer)."""
    hvd.init()
    xs = [np.full(n, hvd.rank(), np.float32) for n in (100000, 200000, 50000)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="three")
    assert all(np.all(o == sum(range(hvd.size()))) for o in outs)
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="packed", prescale_factor=2.0)
    assert all(np.all(o == 2 * sum(range(hvd.size()))) for o in outs)


def grouped_allreduce_in_pieces_not_reduced_in_the_tensors():
    """Grouped allreduces in 512 KiB pieces that some or all ranks must pack
    rather than reduce where the tensors lie: one tensor given twice (its
    result would be read back as input), and a rank that has joined (it has
    no input) while the others average. Returns the checks that failed."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    t = np.full(200000, rank + 1, np.float32)
    hvd.grouped_allreduce_([t, t], op=hvd.Sum, name="twice")
    if not np.all(t == sum(range(1, size + 1))):
        failures.append(["twice", float(t.min()), float(t.max())])
    if rank == size - 1:
        hvd.join()
        return failures
    xs = [np.full(n, rank + 1, np.float32) for n in (100000, 200000, 50000)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Average, name="joined")
    expected = np.float32(sum(range(1, size))) / np.float32(size)  # the joined rank adds zeros
    for i, o in enumerate(outs):
        if not np.allclose(o, expected, rtol=1e-6):
            failures.append(["joined", i, float(o.min()), float(o.max()), float(expected)])
    hvd.join()
    return failures


def grouped_allreduce_in_one_process():
    """Grouped allreduces in a job of one process, where each result is the
    tensor itself (scaled): every dtype and op in place and out of place,
    scale factors, and one tensor given twice (its memory read back as
    input: packed, so that each element is scaled once). Returns the
    failures."""
    hvd.init()
    assert hvd.size() == 1
    failures = []
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product, "Average": hvd.Average}
    for name in DTYPES:
        inputs = [make(0, (c,), name) for c in (5, 0, 17, 1000)]
        for k, (opname, op) in enumerate(ops.items()):
            if name == "bool" and opname == "Average":
                continue
            if k % 2:
                outs = [x.copy() for x in inputs]
                hvd.grouped_allreduce_(outs, op=op, name="alone.%s.%s" % (name, opname))
            else:
                outs = hvd.grouped_allreduce(inputs, op=op, name="alone.%s.%s" % (name, opname))
            failures += ["%s.%s[%d]" % (name, opname, i) for i, (o, x) in enumerate(zip(outs, inputs))
                         if o.dtype != x.dtype or not np.array_equal(o, x)]
    xs = [make(0, (c,), "float32") for c in (3, 4000)]
    scaled = hvd.grouped_allreduce(xs, op=hvd.Average, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
    failures += ["scaled[%d]" % i for i, (o, x) in enumerate(zip(scaled, xs))
                 if not np.array_equal(o, (x * np.float32(0.5)) * np.float32(3.0))]
    t = np.arange(1000, dtype=np.float32)
    hvd.grouped_allreduce_([t, t], op=hvd.Sum, prescale_factor=2.0, name="twice")
    if not np.array_equal(t, np.arange(1000, dtype=np.float32) * 2):
        failures.append(["twice", float(t[1]), float(t[-1])])
    return failures


def allgather_with_different_first_dimensions_every_dtype():
    """Returns the cases whose gathered result differs from the concatenated inputs."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    for name in DTYPES:
        for tail in [(), (3,), (2, 5)]:
            parts = [make(r, (r + 1,) + tail, name) for r in range(size)]
            out = hvd.allgather(parts[rank], name="ag.%s.%s" % (name, tail))
            if not close(out, np.concatenate(parts), name):
                failures.append([name, str(tail)])
    zero_rows = hvd.allgather(np.zeros((0 if rank % 2 else 2, 3), np.float32))
    if zero_rows.shape != (2 * ((size + 1) // 2), 3):
        failures.append(["zero_rows", str(zero_rows.shape)])
    grouped = hvd.grouped_allgather([np.full((rank + 1,), rank, np.int64), np.full((1, 2), rank, np.float32)])
    if grouped[0].tolist() != [r for r in range(size) for _ in range(r + 1)] or grouped[1].shape != (size, 2):
        failures.append(["grouped"])
    return failures


def large_allgather_results_are_owned_writable_and_independent():
    """Allgathers whose results (1 MiB and more) the core allocates from its pool
    of reused blocks and numpy wraps without a copy: each result must be
    writable, keep its values while later allgathers of the same size reuse
    freed blocks, and outlive its base array through a view. Uneven first
    dimensions, a rank with no rows and several dtypes. Returns the failures."""
    import gc

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    row = 4096  # elements per row

    def rows_of(r, case):
        # case 0: uneven; case 1: rank 1 (the last rank at P=2) sends no rows.
        return 64 + 16 * r if case == 0 else (0 if r == 1 else 96)

    def part(r, case, name):
        return make(r + 10 * case, (rows_of(r, case), row), name)

    kept = []
    for name in ["float32", "int8", "float64", "bool", "uint16"]:
        for case in (0, 1):
            want = np.concatenate([part(r, case, name) for r in range(size)])
            out = hvd.allgather(part(rank, case, name), name="big.%s.%d" % (name, case))
            if not out.flags.writeable or not out.flags.c_contiguous or out.dtype != dt(name):
                failures.append(["flags", name, case, bool(out.flags.writeable), str(out.dtype)])
            if not close(out, want, name):
                failures.append(["value", name, case])
            kept.append((out, want, name))
    # Freed results' blocks come back for the next allgathers of their size:
    # scribble on one, free it, and the next result of that size must still be
    # exactly the gathered data; a view keeps its memory from being reused.
    pooled = os.environ.get("HVD_RESULT_POOL_BYTES") != "0"
    for step in range(3):
        want = np.concatenate([part(r, 0, "float32") for r in range(size)])
        out = hvd.allgather(part(rank, 0, "float32"), name="reuse.%d" % step)
        if not close(out, want, "float32"):
            failures.append(["reused block", step])
        address = out.ctypes.data
        tail = out[-3:]
        out[:] = -1.0
        del out
        gc.collect()
        again = hvd.allgather(part(rank, 0, "float32"), name="reuse.again.%d" % step)
        if not close(again, want, "float32"):
            failures.append(["after scribble", step])
        if not np.all(tail == -1.0):
            failures.append(["view lost its memory", step])
        if again.ctypes.data == address:
            failures.append(["block of a live view handed out again", step])
        # Once the last view is gone the block goes back to the pool, and the
        # next result of its size gets it (the most recently freed): freed,
        # not leaked.
        del again
        gc.collect()
        del tail
        gc.collect()
        third = hvd.allgather(part(rank, 0, "float32"), name="reuse.third.%d" % step)
        if pooled and third.ctypes.data != address:
            failures.append(["freed block not reused", step])
        del third
    handle = hvd.allgather_async(part(rank, 1, "float64"), name="big.async")
    asynchronous = hvd.synchronize(handle)
    if not close(asynchronous, np.concatenate([part(r, 1, "float64") for r in range(size)]), "float64"):
        failures.append(["async"])
    grouped = hvd.grouped_allgather([part(rank, 0, "float32"), part(rank, 1, "float32")], name="big.grouped")
    for case, out in enumerate(grouped):
        if not close(out, np.concatenate([part(r, case, "float32") for r in range(size)]), "float32"):
            failures.append(["grouped", case])
    failures += kept_results_survive_shutdown(kept)
    del kept, out
    gc.collect()
    return failures


def fused_allgather_of_many_tensors():
    """Grouped and concurrent allgathers of same-dtype tensors (fused into one
    allgatherv unless HOROVOD_FUSION_THRESHOLD forbids it), some with no rows
    on some ranks; returns the cases whose result differs from the
    concatenated inputs."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()

    def part(r, i):
        rows = (r + i) % 3
        return (np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + 100 * r + 10 * i)

    failures = []
    for step in range(3):
        grouped = hvd.grouped_allgather([part(rank, i) for i in range(6)], name="fused.%d" % step)
        for i, out in enumerate(grouped):
            if not np.array_equal(out, np.concatenate([part(r, i) for r in range(size)])):
                failures.append(["grouped", step, i])
        handles = [hvd.allgather_async(part(rank, i).reshape(-1), name="async.%d.%d" % (step, i)) for i in range(4)]
        for i, h in enumerate(handles):
            if not np.array_equal(hvd.synchronize(h), np.concatenate([part(r, i).reshape(-1) for r in range(size)])):
                failures.append(["async", step, i])
    hvd.shutdown()
    return failures


def fused_reducescatter_of_many_tensors():
    """Grouped and concurrent reducescatters of same-dtype tensors whose rows
    do not split evenly (fused into one reducescatter unless
    HOROVOD_FUSION_THRESHOLD forbids it), with an op and scale factors;
    returns the cases whose block differs from the reference."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()

    def part(r, i):
        return np.arange((2 * i + 1) * 3, dtype=np.float32).reshape(2 * i + 1, 3) * (r + 1) + i

    def block(full, rows):
        start = sum(rows // size + (m < rows % size) for m in range(rank))
        return full[start:start + rows // size + (rank < rows % size)]

    failures = []
    for step in range(2):
        outs = hvd.grouped_reducescatter([part(rank, i) for i in range(5)], name="rs.%d" % step, op=hvd.Sum,
                                         prescale_factor=2.0, postscale_factor=0.5)
        for i, out in enumerate(outs):
            want = block(sum(part(r, i) for r in range(size)), 2 * i + 1)
            if out.shape != want.shape or not np.allclose(out, want):
                failures.append(["grouped", step, i])
        handles = [hvd.reducescatter_async(part(rank, i), name="rsa.%d.%d" % (step, i), op=hvd.Average)
                   for i in range(3)]
        for i, h in enumerate(handles):
            want = block(sum(part(r, i) for r in range(size)) / size, 2 * i + 1)
            out = hvd.synchronize(h)
            if out.shape != want.shape or not np.allclose(out, want):
                failures.append(["async", step, i])
    hvd.shutdown()
    return failures


def broadcast_from_every_root():
    """Returns the [root, case] pairs whose broadcast result (or untouched input) is wrong."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    for root in range(size):
        for name in DTYPES:
            x = make(rank, (6, 4), name)
            out = hvd.broadcast(x, root, name="bc.%d.%s" % (root, name))
            if not close(out, make(root, (6, 4), name), name) or not close(x, make(rank, (6, 4), name), name):
                failures.append([root, name])
        y = np.full(100000, rank, np.float32)
        hvd.broadcast_(y, root, name="bc_inplace.%d" % root)
        if not np.all(y == root):
            failures.append([root, "inplace"])
    obj = hvd.broadcast_object({"rank": rank, "list": [1, 2]} if rank == size - 1 else None, root_rank=size - 1)
    if obj != {"rank": size - 1, "list": [1, 2]}:
        failures.append(["object", str(obj)])
    if hvd.allgather_object(rank * 10) != [r * 10 for r in range(size)]:
        failures.append(["allgather_object"])
    return failures


def alltoall_with_and_without_splits():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {}
    # Even split: rank r sends rows [r*size + d] to rank d.
    x = np.array([[rank * size + d, -1] for d in range(size)], dtype=np.int64)
    res = hvd.alltoall(x)
    out["even"] = res[:, 0].tolist() == [s * size + rank for s in range(size)]
    # Uneven: rank r sends (d + r) % 3 rows to rank d, each row = [r, d].
    splits = [(d + rank) % 3 for d in range(size)]
    rows = [[rank, d] for d in range(size) for _ in range(splits[d])]
    x = np.array(rows, dtype=np.float32).reshape(-1, 2)
    res, received = hvd.alltoall(x, splits=splits, name="uneven")
    expect_rows = [[s, rank] for s in range(size) for _ in range((rank + s) % 3)]
    out["uneven"] = res.reshape(-1, 2).tolist() == expect_rows
    out["received"] = received.tolist() == [(rank + s) % 3 for s in range(size)]
    return out


def reducescatter_uneven_first_dimension_and_grouped():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {}
    for rows in [size, 2 * size + 1, 7]:
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) * (rank + 1)
        total = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) * sum(r + 1 for r in range(size))
        counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
        start = sum(counts[:rank])
        res = hvd.reducescatter(x, op=hvd.Sum, name="rs.%d" % rows)
        out["sum%d" % rows] = res.shape == (counts[rank], 3) and np.allclose(res, total[start:start + counts[rank]])
        avg = hvd.reducescatter(x, name="rsavg.%d" % rows)
        out["avg%d" % rows] = np.allclose(avg, total[start:start + counts[rank]] / size)
    g = hvd.grouped_reducescatter([np.ones((size * 2, 2), np.float64) * rank, np.ones((size,), np.int32)],
                                  op=hvd.Sum)
    out["grouped"] = np.allclose(g[0], sum(range(size))) and g[0].shape == (2, 2) and g[1].tolist() == [size]
    return {k: bool(v) for k, v in out.items()}


def barrier_and_join():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {}
    t0 = time.time()
    if rank == 0:
        time.sleep(0.5)
    hvd.barrier()
    out["barrier_waited"] = time.time() - t0 >= 0.45
    # Rank r runs r + 1 steps, then joins; the last rank's steps see zeros from joined ranks.
    sums = []
    for step in range(rank + 1):
        sums.append(hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name="step.%d" % step).tolist())
    # Only allreduce can run while some ranks have joined (Horovod's rule).
    if rank == size - 1 and size > 1:
        try:
            hvd.allgather(np.ones(1, np.float32), name="gather_after_join")
            out["allgather_refused"] = False
        except hvd.HorovodCollectiveMismatchError as e:
            out["allgather_refused"] = "only allreduce supports join" in str(e)
    last = hvd.join()
    out["last"] = last == size - 1
    out["sums"] = sums == [[float(size - s)] * 3 for s in range(rank + 1)]
    # Join resets: the next round works normally.
    out["after"] = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum).tolist() == [float(size)] * 2
    return out


def float16_and_bfloat16_sums():
    """Returns each dtype's worst error in ulps, and the sum of one large and many small values."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {}
    rng = np.random.default_rng(1234)
    values = rng.standard_normal((size, 4096)).astype(np.float32)
    for name, dtype in [("float16", np.float16), ("bfloat16", dt("bfloat16"))]:
        inputs = values.astype(dtype)
        exact = inputs.astype(np.float64).sum(0)
        res = hvd.allreduce(inputs[rank], op=hvd.Sum, name=name).astype(np.float64)
        # One rounding of the exact sum, or one ulp around it (ring over TCP rounds per step).
        # float16: numpy knows its spacing; bfloat16 has 8 significant bits, so an
        # ulp is at most |x| * 2**-7.
        if name == "float16":
            ulp = np.abs(np.spacing(exact.astype(np.float16))).astype(np.float64)
        else:
            ulp = np.abs(exact) * 2.0 ** -7
        out[name] = float(np.max(np.abs(res - exact) / (ulp + 1e-30)))
        # A sum that underflows in per-step rounding: many small values on top of a large one.
        big = np.full(8, 256.0 if rank == 0 else 0.125, np.float32).astype(dtype)
        s = hvd.allreduce(big, op=hvd.Sum, name=name + ".small").astype(np.float64)
        out[name + ".small"] = float(s[0])
    return out


# Adasum: a numpy reference of the pairwise tree over ranks (0,1) (2,3) ...,
# (01,23) ...; with a rank count that is not a power of two the unpaired
# subtree moves up unchanged.
def adasum_pair(a, b):
    aa, bb, ab = float(a @ a), float(b @ b), float(a @ b)
    wa = 1.0 - ab / (2 * aa) if aa else 1.0
    wb = 1.0 - ab / (2 * bb) if bb else 1.0
    return wa * a + wb * b


def adasum_tree(vectors):
    vectors = [v.astype(np.float64).ravel() for v in vectors]
    stride = 1
    while stride < len(vectors):
        for left in range(0, len(vectors) - stride, 2 * stride):
            vectors[left] = adasum_pair(vectors[left], vectors[left + stride])
        stride *= 2
    return vectors[0]


def adasum_against_the_pairwise_tree():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {}
    rng = np.random.default_rng(7)
    # Several tensors of different sizes (fused into one buffer, split unevenly
    # across ranks' blocks), each with its own weights.
    shapes = [(5,), (1000,), (3, 7), (1,), (257,)]
    values = [rng.standard_normal((size,) + s) for s in shapes]
    for name, dtype, tol in [("float64", np.float64, 1e-12), ("float32", np.float32, 1e-5),
                             ("float16", np.float16, 2e-3), ("bfloat16", dt("bfloat16"), 1e-2)]:
        inputs = [v.astype(dtype) for v in values]
        got = hvd.grouped_allreduce([x[rank] for x in inputs], op=hvd.Adasum, name="g." + name)
        err = 0.0
        for x, g in zip(inputs, got):
            ref = adasum_tree([x[r] for r in range(size)])
            assert g.dtype == np.dtype(dtype) and g.shape == x.shape[1:], (name, g.dtype, g.shape)
            err = max(err, float(np.max(np.abs(g.astype(np.float64).ravel() - ref) / (np.abs(ref) + 1))))
        out[name] = err <= tol
        # A lone tensor, with scale factors applied before and after.
        x = inputs[1]
        g = hvd.allreduce(x[rank], op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0, name="one." + name)
        ref = 3.0 * adasum_tree([0.5 * x[r].astype(np.float64) for r in range(size)])
        out["scaled." + name] = bool(np.allclose(g.astype(np.float64), ref, rtol=tol * 10, atol=tol * 10))
    # The defining cases: identical gradients stay as they are (not multiplied by
    # the rank count); orthogonal ones add up.
    same = hvd.allreduce(np.array([1.0, 2.0, -3.0]), op=hvd.Adasum, name="same")
    out["identical"] = same.tolist() == [1.0, 2.0, -3.0]
    basis = np.zeros(4)
    basis[rank] = rank + 1.0
    out["orthogonal"] = hvd.allreduce(basis, op=hvd.Adasum, name="orth").tolist() == \
        [float(r + 1) if r < size else 0.0 for r in range(4)]
    # Identical results on every rank, bit for bit.
    mine = hvd.allreduce(rng.standard_normal(333) + rank, op=hvd.Adasum, name="bits")
    everyone = hvd.allgather(mine[None])
    out["same_on_all_ranks"] = all(np.array_equal(everyone[0], e) for e in everyone)
    try:
        hvd.allreduce(np.arange(4, dtype=np.int32), op=hvd.Adasum, name="ints")
        out["int_rejected"] = False
    except ValueError as e:
        out["int_rejected"] = "int32" in str(e) and "Adasum" in str(e)
    return out


def a_burst_of_single_async_allreduces(count=10, rounds=3, spacing=2e-3):
    """`rounds` times: `count` single-tensor allreduce_async_ calls submitted
    `spacing` seconds apart with no one waiting (as a training step's hooks
    submit gradients; the rank sleeps in between, so its background thread is
    free to run), then synchronized. Returns the checks that failed and how
    many request batches each round took (hvd_process_set_info)."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures, batches = [], []
    for r in range(rounds):
        xs = [np.full(1000 + i, rank + i + r, np.float32) for i in range(count)]
        before = hvd.global_process_set._info().request_batches
        handles = []
        for i, x in enumerate(xs):
            handles.append(hvd.allreduce_async_(x, op=hvd.Sum, name="burst.%d" % i))
            time.sleep(spacing)
        for h in handles:
            hvd.synchronize(h)
        batches.append(hvd.global_process_set._info().request_batches - before)
        for i, x in enumerate(xs):
            want = sum(q + i + r for q in range(size))
            if not np.all(x == want):
                failures.append([r, i, float(x.min()), float(x.max()), want])
    return {"failures": failures, "batches": batches}


def a_held_allreduce_ends_its_hold_or_is_taken_by_its_caller():
    """A lone allreduce_async_ that no one waits for, polled until done; then
    one synchronized at once. Returns the seconds each took and whether the
    results were right."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    x = np.full(8, rank, np.float32)
    start = time.monotonic()
    handle = hvd.allreduce_async_(x, op=hvd.Sum, name="polled")
    while not hvd.poll(handle):
        time.sleep(1e-3)
    polled = time.monotonic() - start
    hvd.synchronize(handle)
    y = np.full(8, rank + 1, np.float32)
    start = time.monotonic()
    hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum, name="waited"))
    waited = time.monotonic() - start
    right = bool(np.all(x == sum(range(size))) and np.all(y == sum(range(1, size + 1))))
    return {"polled": polled, "waited": waited, "right": right}
