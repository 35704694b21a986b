# collectives.py - rank side of test_collectives.py: every collective on
# every NDArray dtype hvd-core reduces, in place and not, checked against
# numpy; the engine's ordering around pushed operations; process sets; join;
# objects.
"""Rank programs for test_collectives.py."""

import json
import os
import tempfile
import threading
import time

import mxnet as mx
import numpy as np

import horovod.mxnet as hvd
from horovod.mxnet import _engine_bridge

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool"]


def _value(rank, dtype, shape, salt=0):
    """A rank's deterministic input: small values so no dtype overflows in a sum of 3."""
    n = int(np.prod(shape))
    base = (np.arange(n) + 3 * rank + salt) % 5
    if dtype == "bool":
        return (base % 2 == rank % 2).reshape(shape)
    return base.astype(dtype).reshape(shape)


def _check(failures, what, got, want):
    got = got.asnumpy() if isinstance(got, mx.nd.NDArray) else np.asarray(got)
    want = np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape or not np.allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-3):
        failures.append("%s: got %s %s %r, want %s %s %r" % (what, got.dtype, got.shape, got.ravel()[:6].tolist(),
                                                             want.dtype, want.shape, want.ravel()[:6].tolist()))


def every_collective_every_dtype():
    """Returns the list of mismatches against numpy (empty when all is right) and what ran."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    failures, ran = [], 0
    shape = (2 * size, 3)
    for dtype in DTYPES:
        inputs = [_value(r, dtype, shape) for r in range(size)]
        mine = mx.nd.array(inputs[rank], dtype=dtype)
        ops = [("sum", hvd.Sum, lambda xs: np.sum(xs, axis=0)),
               ("min", hvd.Min, lambda xs: np.min(xs, axis=0)),
               ("max", hvd.Max, lambda xs: np.max(xs, axis=0))]
        if dtype != "bool":
            ops.append(("product", hvd.Product, lambda xs: np.prod(xs, axis=0)))
        if dtype.startswith("float"):
            ops.append(("average", hvd.Average, lambda xs: np.mean(xs, axis=0)))
        for op_name, op, ref in ops:
            want = ref(np.stack(inputs)).astype(dtype)
            _check(failures, "allreduce %s %s" % (dtype, op_name),
                   hvd.allreduce(mine, op=op, name="ar.%s.%s" % (dtype, op_name)), want)
            _check(failures, "allreduce input untouched %s" % dtype, mine, inputs[rank])
            inplace = mine.copy()
            out = hvd.allreduce_(inplace, op=op, name="ar_.%s.%s" % (dtype, op_name))
            _check(failures, "allreduce_ %s %s" % (dtype, op_name), inplace, want)
            if out is not inplace:
                failures.append("allreduce_ did not return its input")
            ran += 2
        if dtype.startswith("float"):
            want = (np.sum(np.stack(inputs).astype(np.float64), axis=0) * 0.5 * 3.0).astype(dtype)
            _check(failures, "allreduce scaled %s" % dtype,
                   hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="sc." + dtype),
                   want)
            ran += 1
        # Grouped, in place and not.
        others = [_value(r, dtype, (5,), salt=1) for r in range(size)]
        group = [mine, mx.nd.array(others[rank], dtype=dtype)]
        want = [np.max(np.stack(inputs), axis=0).astype(dtype), np.max(np.stack(others), axis=0).astype(dtype)]
        for got, w in zip(hvd.grouped_allreduce(group, op=hvd.Max, name="gar." + dtype), want):
            _check(failures, "grouped_allreduce %s" % dtype, got, w)
        copies = [t.copy() for t in group]
        hvd.grouped_allreduce_(copies, op=hvd.Max, name="gar_." + dtype)
        for got, w in zip(copies, want):
            _check(failures, "grouped_allreduce_ %s" % dtype, got, w)
        ran += 2
        # Broadcast from every root.
        for root in range(size):
            _check(failures, "broadcast %s root %d" % (dtype, root),
                   hvd.broadcast(mine, root_rank=root, name="bc.%s.%d" % (dtype, root)), inputs[root])
            target = mine.copy()
            hvd.broadcast_(target, root_rank=root, name="bc_.%s.%d" % (dtype, root))
            _check(failures, "broadcast_ %s root %d" % (dtype, root), target, inputs[root])
            ran += 2
        # Allgather with a first dimension that differs between ranks.
        rows = [_value(r, dtype, (r + 1, 3), salt=2) for r in range(size)]
        _check(failures, "allgather %s" % dtype,
               hvd.allgather(mx.nd.array(rows[rank], dtype=dtype), name="ag." + dtype), np.concatenate(rows))
        got = hvd.grouped_allgather([mx.nd.array(rows[rank], dtype=dtype), mine], name="gag." + dtype)
        _check(failures, "grouped_allgather %s [0]" % dtype, got[0], np.concatenate(rows))
        _check(failures, "grouped_allgather %s [1]" % dtype, got[1], np.concatenate(inputs))
        ran += 2
        # Alltoall: rank r sends r+1+j rows to rank j.
        splits = [rank + 1 + j for j in range(size)]
        sent = _value(rank, dtype, (sum(splits), 2), salt=3)
        out, received = hvd.alltoall(mx.nd.array(sent, dtype=dtype), splits=mx.nd.array(splits, dtype="int32"),
                                     name="a2a." + dtype)
        parts = []
        for src in range(size):
            src_splits = [src + 1 + j for j in range(size)]
            src_sent = _value(src, dtype, (sum(src_splits), 2), salt=3)
            start = sum(src_splits[:rank])
            parts.append(src_sent[start:start + src_splits[rank]])
        _check(failures, "alltoall %s" % dtype, out, np.concatenate(parts))
        _check(failures, "alltoall received splits %s" % dtype, received,
               np.array([src + 1 + rank for src in range(size)], dtype=np.int32))
        even = hvd.alltoall(mine, name="a2a_even." + dtype)
        _check(failures, "alltoall even %s" % dtype, even,
               np.concatenate([inputs[src][2 * rank:2 * rank + 2] for src in range(size)]))
        ran += 2
        # Reducescatter (Sum; Average for floats) and its grouped form.
        if dtype != "bool":
            op = hvd.Average if dtype.startswith("float") else hvd.Sum
            ref = np.mean if dtype.startswith("float") else np.sum
            full = ref(np.stack(inputs), axis=0).astype(dtype)
            _check(failures, "reducescatter %s" % dtype,
                   hvd.reducescatter(mine, op=op, name="rs." + dtype), full[2 * rank:2 * rank + 2])
            got = hvd.grouped_reducescatter([mine, mine], op=op, name="grs." + dtype)
            for g in got:
                _check(failures, "grouped_reducescatter %s" % dtype, g, full[2 * rank:2 * rank + 2])
            ran += 2
    ran += _bfloat16_cases(failures, rank, size)
    hvd.barrier()
    return {"failures": failures, "ran": ran}


# MXNet's bfloat16: NDArray.dtype is numpy's structured stand-in for it, and
# values go in and out through float32 (amp_cast).
BF16 = np.dtype(mx.ndarray.ndarray._DTYPE_MX_TO_NP[12])


def _to_bf16(values):
    return mx.nd.amp_cast(mx.nd.array(values, dtype="float32"), dtype=BF16)


def _bf16_rounded(values):
    """float32 `values` rounded to bfloat16 and back: what a bfloat16 NDArray of them holds."""
    return mx.nd.amp_cast(_to_bf16(values), dtype="float32").asnumpy()


def _check_bf16(failures, what, got, want, exact=True):
    """`got` must be a bfloat16 NDArray equal to float32 `want` rounded to bfloat16 (within one
    bfloat16 step when not `exact`: sums of three rounded values may round at each step)."""
    if not isinstance(got, mx.nd.NDArray) or np.dtype(got.dtype) != BF16:
        failures.append("%s: got %r, want a bfloat16 NDArray" % (what, getattr(got, "dtype", got)))
        return
    got = mx.nd.amp_cast(got, dtype="float32").asnumpy()
    want = _bf16_rounded(np.asarray(want, dtype=np.float32))
    ok = got.shape == want.shape and (np.array_equal(got, want) if exact else
                                      np.allclose(got, want, rtol=2.0 ** -7, atol=0))
    if not ok:
        failures.append("%s: got %s %r, want %s %r" % (what, got.shape, got.ravel()[:6].tolist(), want.shape,
                                                       want.ravel()[:6].tolist()))


def _bfloat16_cases(failures, rank, size):
    """Every collective on bfloat16 NDArrays against float32 references on the bfloat16-rounded inputs.

    `halves` (multiples of 0.5 up to 2.5) and every sum, product and scaled
    sum of three of them are exact in bfloat16, so those results must match
    bit for bit; `fractions` round on the way in, and their sums are checked
    to within one bfloat16 step.
    """
    ran = 0
    shape = (2 * size, 3)
    n = int(np.prod(shape))
    halves = [(((np.arange(n) + 3 * r) % 5) * 0.5 - 0.5).reshape(shape).astype(np.float32) for r in range(size)]
    fractions = [_bf16_rounded((np.arange(n) * 0.1234 + r * 0.777 + 1.0).reshape(shape)) for r in range(size)]
    stacked = np.stack(halves)
    mine = _to_bf16(halves[rank])
    for op_name, op, want, exact in [("sum", hvd.Sum, stacked.sum(0), True), ("min", hvd.Min, stacked.min(0), True),
                                     ("max", hvd.Max, stacked.max(0), True),
                                     ("product", hvd.Product, stacked.prod(0), True),
                                     ("average", hvd.Average, stacked.mean(0), size == 2)]:
        _check_bf16(failures, "bf16 allreduce %s" % op_name, hvd.allreduce(mine, op=op, name="bf.%s" % op_name),
                    want, exact)
        inplace = mine.copy()
        hvd.allreduce_(inplace, op=op, name="bf_.%s" % op_name)
        _check_bf16(failures, "bf16 allreduce_ %s" % op_name, inplace, want, exact)
        ran += 2
    _check_bf16(failures, "bf16 allreduce input untouched", mine, halves[rank])
    _check_bf16(failures, "bf16 allreduce rounded inputs",
                hvd.allreduce(_to_bf16(fractions[rank]), op=hvd.Sum, name="bf.fractions"),
                np.stack(fractions).sum(0), exact=False)
    _check_bf16(failures, "bf16 allreduce scaled",
                hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="bf.scaled"),
                stacked.sum(0) * 1.5)
    group = [mine, _to_bf16(fractions[rank])]
    want = [stacked.sum(0), np.stack(fractions).sum(0)]
    for i, got in enumerate(hvd.grouped_allreduce(group, op=hvd.Sum, name="bf.group")):
        _check_bf16(failures, "bf16 grouped_allreduce [%d]" % i, got, want[i], exact=i == 0)
    copies = [t.copy() for t in group]
    hvd.grouped_allreduce_(copies, op=hvd.Sum, name="bf_.group")
    for i, got in enumerate(copies):
        _check_bf16(failures, "bf16 grouped_allreduce_ [%d]" % i, got, want[i], exact=i == 0)
    ran += 4
    for root in range(size):
        _check_bf16(failures, "bf16 broadcast root %d" % root,
                    hvd.broadcast(_to_bf16(fractions[rank]), root_rank=root, name="bf.bc.%d" % root), fractions[root])
        target = mine.copy()
        hvd.broadcast_(target, root_rank=root, name="bf.bc_.%d" % root)
        _check_bf16(failures, "bf16 broadcast_ root %d" % root, target, halves[root])
        ran += 2
    rows = [fractions[r][:r + 1] for r in range(size)]
    _check_bf16(failures, "bf16 allgather", hvd.allgather(_to_bf16(rows[rank]), name="bf.ag"), np.concatenate(rows))
    got = hvd.grouped_allgather([_to_bf16(rows[rank]), mine], name="bf.gag")
    _check_bf16(failures, "bf16 grouped_allgather [0]", got[0], np.concatenate(rows))
    _check_bf16(failures, "bf16 grouped_allgather [1]", got[1], np.concatenate(halves))
    # Alltoall: rank r sends rows [2j, 2j+2) of its fractions to rank j.
    out, received = hvd.alltoall(_to_bf16(fractions[rank]), splits=[2] * size, name="bf.a2a")
    _check_bf16(failures, "bf16 alltoall", out,
                np.concatenate([fractions[src][2 * rank:2 * rank + 2] for src in range(size)]))
    if received.asnumpy().tolist() != [2] * size:
        failures.append("bf16 alltoall received splits: %r" % received.asnumpy().tolist())
    _check_bf16(failures, "bf16 reducescatter sum", hvd.reducescatter(mine, op=hvd.Sum, name="bf.rs"),
                stacked.sum(0)[2 * rank:2 * rank + 2])
    for i, got in enumerate(hvd.grouped_reducescatter([mine, mine], op=hvd.Average, name="bf.grs")):
        _check_bf16(failures, "bf16 grouped_reducescatter average [%d]" % i, got,
                    stacked.mean(0)[2 * rank:2 * rank + 2], exact=size == 2)
    return ran + 6


def engine_order_is_respected():
    """Pushed collectives run after their inputs' writers and before their outputs' readers."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    results = {}
    # A slow producer: the allreduce must wait for it, not read the old values.
    x = mx.nd.ones((64, 64)) * (rank + 1)
    for _ in range(20):
        x = mx.nd.dot(x, mx.nd.eye(64))
    y = hvd.allreduce(x, op=hvd.Sum, name="after_writer")
    z = y + 1  # pushed before the allreduce is done; must see its result
    results["after_writer"] = float(z.asnumpy()[0, 0])
    # In place, then read: the reader waits for the collective.
    w = mx.nd.ones((3,)) * rank
    hvd.allreduce_(w, op=hvd.Sum, name="inplace_then_read")
    results["inplace_then_read"] = (w * 2).asnumpy().tolist()
    # A writer pushed after the collective must not overwrite its input before it is sent.
    v = mx.nd.ones((3,)) * (rank + 1)
    out = hvd.allreduce(v, op=hvd.Sum, name="before_writer")
    v[:] = 100
    results["before_writer"] = out.asnumpy().tolist()
    # Many in flight at once, submitted in different orders on different ranks.
    arrays = [mx.nd.ones((4,)) * i for i in range(16)]
    order = list(range(16)) if rank % 2 == 0 else list(reversed(range(16)))
    outs = {i: hvd.allreduce(arrays[i], op=hvd.Sum, name="many.%d" % i, priority=i) for i in order}
    results["many"] = [float(outs[i].asnumpy()[0]) for i in range(16)]
    results["size"] = size
    results.update(_blocking_collectives_are_engine_operations(rank, size))
    return results


def _blocking_collectives_are_engine_operations(rank, size):
    """allgather (like alltoall and reducescatter) is an operation on MXNet's engine while it waits:
    a write to its input pushed meanwhile, from another thread, runs after it; MXNet's profiler lists it."""
    results = {}
    hvd.barrier()
    g = mx.nd.ones((1, 2)) * (rank + 1)
    seen = {}
    writer = None
    if rank == size - 1:
        time.sleep(1.0)  # the late rank: the others' allgathers wait in the engine meanwhile
    else:
        def overwrite():
            deadline = time.monotonic() + 10
            while _engine_bridge.pending_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            seen["pending_before_write"] = _engine_bridge.pending_count()
            g[:] = 99
            g.wait_to_read()
            seen["pending_after_write"] = _engine_bridge.pending_count()
        writer = threading.Thread(target=overwrite)
        writer.start()
    gathered = hvd.allgather(g, name="blocking_order")
    if writer is not None:
        writer.join()
    results["blocking_gathered"] = gathered.asnumpy()[:, 0].tolist()
    results["blocking_writer"] = seen
    # Their names in MXNet's profiler, as MXNet's own operators have.
    path = os.path.join(tempfile.mkdtemp(), "profile.json")
    mx.profiler.set_config(profile_imperative=True, aggregate_stats=False, filename=path)
    mx.profiler.set_state("run")
    x = mx.nd.ones((2 * size, 2))
    hvd.allreduce(x, name="profiled").wait_to_read()
    hvd.allgather(x, name="profiled")
    hvd.alltoall(x, name="profiled")
    hvd.reducescatter(x, name="profiled")
    mx.nd.waitall()
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    with open(path) as f:
        names = {event.get("name") for event in json.load(f)["traceEvents"]}
    results["profiled"] = sorted(n for n in names if n and n.startswith("Horovod"))
    return results


def process_sets_and_join():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    report = {}
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    if evens.included():
        t = mx.nd.ones((3,)) * (rank + 1)
        report["set_allreduce"] = hvd.allreduce(t, op=hvd.Sum, name="ps", process_set=evens).asnumpy().tolist()
        report["set_broadcast"] = hvd.broadcast(mx.nd.ones((2,)) * rank, root_rank=0, name="psb",
                                                process_set=evens).asnumpy().tolist()
        report["set_allgather"] = hvd.allgather(mx.nd.ones((1,)) * rank, name="psg",
                                                process_set=evens).asnumpy().tolist()
    hvd.barrier()
    hvd.remove_process_set(evens)
    # Join: the last rank has one batch more; the others stand in with zeros.
    if rank == size - 1:
        report["joined_sum"] = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="extra").asnumpy().tolist()
    report["last_joined"] = hvd.join()
    report["object"] = hvd.broadcast_object({"from": rank}, root_rank=size - 1)
    report["objects"] = hvd.allgather_object(("rank", rank))
    return report
