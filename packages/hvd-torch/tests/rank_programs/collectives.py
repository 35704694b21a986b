# collectives.py - rank side of test_collectives.py: every collective of
# horovod.torch (plain, in-place, async, grouped), every dtype, autograd and
# process sets, each rank checking its results against references computed
# from all ranks' deterministic inputs; and test_collectives.py's CUDA check.
"""Rank programs for test_collectives.py."""

import os
import time
import traceback

import numpy as np
import torch

import horovod.common as hvd_common
import horovod.torch as hvd

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)


def every_collective_check():
    """Runs every check at this world size; returns {check: first failure or None}."""
    size_env = int(os.environ["HOROVOD_SIZE"])
    # A set equal to the global one is a duplicate (refused, as by Horovod): with
    # one rank, the "even" ranks are the global set itself.
    even_ranks = hvd.ProcessSet(range(0, size_env, 2)) if size_env > 1 else hvd.global_process_set
    hvd.init(process_sets=[even_ranks] if size_env > 1 else [])
    size, rank = hvd.size(), hvd.rank()
    report = {}

    def expect(check, ok, detail=""):
        # Records instead of raising: every rank must still run every collective.
        if not ok and report.get(check) is None:
            report[check] = "rank %d: %s" % (rank, detail)
        report.setdefault(check, None)

    def guarded(check, fn):
        try:
            fn()
        except Exception:
            report[check] = "rank %d: %s" % (rank, traceback.format_exc())

    DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.bool]
    FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

    def make(r, shape, dtype):
        n = 1
        for s in shape:
            n *= s
        base = (torch.arange(n, dtype=torch.int64) * 7 + r * 3) % 11
        if dtype == torch.bool:
            return ((base + r) % 3 == 0).reshape(shape)
        if dtype in FLOATS:
            return ((base - 5).double() * 0.25).to(dtype).reshape(shape)
        if dtype == torch.uint8:
            return (base % 4).to(dtype).reshape(shape)
        return ((base % 5) - 2).to(dtype).reshape(shape)

    def same(a, b, dtype):
        if a.shape != b.shape or a.dtype != dtype:
            return False
        if dtype in (torch.float16, torch.bfloat16):
            return torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2)
        if dtype in FLOATS:
            return torch.allclose(a.double(), b.double(), rtol=1e-6, atol=1e-6)
        return torch.equal(a, b)

    def reference(inputs, opname, dtype):
        if dtype == torch.bool:
            stacked = torch.stack(inputs)
            return stacked.all(0) if opname == "Min" else stacked.any(0)
        wide = torch.stack([x.double() for x in inputs])
        ref = {"Sum": wide.sum(0), "Min": wide.min(0).values, "Max": wide.max(0).values,
               "Average": wide.sum(0) / size}[opname]
        if opname == "Average" and dtype not in FLOATS:
            ref = torch.trunc(ref)
        return ref.to(dtype)

    OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max}

    # --- allreduce: every dtype and op; the input is not modified
    for dtype in DTYPES:
        for shape in [(5,), (3, 4)]:
            inputs = [make(r, shape, dtype) for r in range(size)]
            for opname, op in OPS.items():
                if dtype == torch.bool and opname == "Average":
                    continue
                mine = inputs[rank].clone()
                out = hvd.allreduce(mine, op=op, name="ar.%s.%s.%s" % (dtype, opname, shape))
                expect("allreduce_dtypes", same(out, reference(inputs, opname, dtype), dtype),
                       "%s %s %s: %s" % (dtype, opname, shape, out))
                expect("allreduce_dtypes", torch.equal(mine, inputs[rank]), "input modified")

    # --- allreduce variants: default op is Average, deprecated average=, scale factors, in place, async
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + rank
    summed = sum(torch.arange(6, dtype=torch.float32).reshape(2, 3) + r for r in range(size))
    expect("allreduce_variants", torch.allclose(hvd.allreduce(x), summed / size), "default Average")
    expect("allreduce_variants", torch.allclose(hvd.allreduce(x, average=False), summed), "average=False")
    expect("allreduce_variants", torch.allclose(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0),
                                                summed * 1.5), "scale factors")
    y = x.clone()
    out = hvd.allreduce_(y, op=hvd.Sum, name="inplace")
    expect("allreduce_variants", out is y and torch.allclose(y, summed), "allreduce_")
    expect("allreduce_variants", torch.allclose(hvd.allreduce(torch.tensor(float(rank)), op=hvd.Sum),
                                                torch.tensor(float(sum(range(size))))), "0-dim")
    empty = hvd.allreduce(torch.zeros(0, 3), op=hvd.Sum, name="empty")
    expect("allreduce_variants", empty.shape == (0, 3), "empty tensor")

    handles = [hvd.allreduce_async(x * i, op=hvd.Sum, name="async.%d" % i) for i in range(4)]
    done = [hvd.poll(h) for h in handles]
    outs = [hvd.synchronize(h) for h in handles]
    expect("allreduce_async", all(torch.allclose(o, summed * i) for i, o in enumerate(outs)), str(outs))
    expect("allreduce_async", all(isinstance(d, bool) for d in done), "poll returns bool")
    ys = [x.clone() for _ in range(3)]
    handles = [hvd.allreduce_async_(t, op=hvd.Max, name="async_.%d" % i) for i, t in enumerate(ys)]
    for h, t in zip(handles, ys):
        expect("allreduce_async", hvd.synchronize(h) is t, "allreduce_async_ returns its tensor")
    expect("allreduce_async", all(torch.allclose(t, x - rank + size - 1) for t in ys), "Max in place")
    # After synchronize the handle is gone.
    try:
        hvd.synchronize(handles[0])
        expect("allreduce_async", False, "second synchronize did not raise")
    except ValueError:
        pass

    # --- large out-of-place allreduces: the engine allocates the result
    # from its pool of reused blocks and torch takes it over
    from horovod.common.engine_calls import ENGINE_ALLOCATED_ALLREDUCE_BYTES as large
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool):
        shape = (1025, large // 1024 // torch.tensor([], dtype=dtype).element_size() + 3)
        inputs = [make(r, shape, dtype) for r in range(size)]
        for opname in ("Sum", "Max"):
            mine = inputs[rank].clone()
            out = hvd.allreduce(mine, op=OPS[opname], name="large.%s.%s" % (dtype, opname))
            expect("allreduce_large", same(out, reference(inputs, opname, dtype), dtype) and out.is_contiguous(),
                   "%s %s" % (dtype, opname))
            expect("allreduce_large", torch.equal(mine, inputs[rank]) and out.data_ptr() != mine.data_ptr(),
                   "input modified or shared")
    big = make(rank, (large // 4096, 1024), torch.float32)
    big_sum = reference([make(r, big.shape, torch.float32) for r in range(size)], "Sum", torch.float32)
    first = hvd.allreduce(big, op=hvd.Sum, name="large.reuse")
    address = first.data_ptr()
    first.fill_(-1.0)
    del first
    blocker = torch.full_like(big, 7.0)  # the freed block is the pool's, not the allocator's
    again = hvd.allreduce(big, op=hvd.Sum, name="large.reuse")
    expect("allreduce_large", same(again, big_sum, torch.float32) and torch.all(blocker == 7.0), "reused block")
    expect("allreduce_large", again.data_ptr() == address, "freed block not reused")
    again.add_(1.0)
    expect("allreduce_large", same(again, big_sum + 1.0, torch.float32), "result not writable")
    outs = [hvd.synchronize(hvd.allreduce_async(big * i, op=hvd.Sum, name="large.async.%d" % i)) for i in range(2)]
    expect("allreduce_large", all(same(o, big_sum * i, torch.float32) for i, o in enumerate(outs)), "async")
    leaf = big.clone().requires_grad_(True)
    reduced = hvd.allreduce(leaf, op=hvd.Average, name="large.grad")
    reduced.sum().backward()
    expect("allreduce_large", same(reduced.detach(), big_sum / size, torch.float32)
           and torch.allclose(leaf.grad, torch.ones_like(big)), "autograd")

    # --- grouped allreduce (+ in place, async)
    group = [make(rank, (4,), torch.float32), make(rank, (2, 3), torch.float64), make(rank, (3,), torch.int32)]
    refs = [reference([make(r, t.shape, t.dtype) for r in range(size)], "Sum", t.dtype) for t in group]
    outs = hvd.grouped_allreduce(group, op=hvd.Sum, name="grouped")
    expect("grouped_allreduce", all(same(o, r, r.dtype) for o, r in zip(outs, refs)), str(outs))
    outs = hvd.synchronize(hvd.grouped_allreduce_async(group, op=hvd.Sum))
    expect("grouped_allreduce", all(same(o, r, r.dtype) for o, r in zip(outs, refs)), "async")
    copies = [t.clone() for t in group]
    outs = hvd.grouped_allreduce_(copies, op=hvd.Sum, name="grouped_")
    expect("grouped_allreduce", all(o is c and same(c, r, r.dtype) for o, c, r in zip(outs, copies, refs)), "in place")
    copies = [t.clone() for t in group]
    hvd.synchronize(hvd.grouped_allreduce_async_(copies, op=hvd.Sum))
    expect("grouped_allreduce", all(same(c, r, r.dtype) for c, r in zip(copies, refs)), "async in place")

    # --- in place groups of CPU tensors keep their argument block from the
    # first call on and only write each call's addresses into it: calls under
    # one name with new tensors, another shape or dtype in the same position,
    # a non-contiguous tensor, or a second call in flight must still behave
    # as the first call would have
    def in_place_group_reuse():
        layouts = [[((5,), torch.float32), ((2, 3), torch.float32), ((7,), torch.int32)]] * 2 + [
            [((5,), torch.float32), ((2, 4), torch.float32), ((7,), torch.int32)],
            [((5,), torch.float32), ((2, 3), torch.float64), ((7,), torch.int32)]]
        done = []  # every call's tensors stay alive: a later call must not write into them
        for call, layout in enumerate(layouts):
            for waits in (True, False):
                seed = 2 * call + waits
                tensors = [make(rank + seed, shape, dtype) for shape, dtype in layout]
                want = [reference([make(r + seed, shape, dtype) for r in range(size)], "Sum", dtype)
                        for shape, dtype in layout]
                if waits:
                    outs = hvd.grouped_allreduce_(tensors, op=hvd.Sum, name="reused")
                else:
                    outs = hvd.synchronize(hvd.grouped_allreduce_async_(tensors, op=hvd.Sum, name="reused"))
                expect("grouped_in_place_reuse", all(o is t for o, t in zip(outs, tensors)), "call %d" % seed)
                done += zip(tensors, want)
        expect("grouped_in_place_reuse", all(same(t, w, w.dtype) for t, w in done),
               [(t.tolist(), w.tolist()) for t, w in done if not same(t, w, w.dtype)])
        strided = [make(rank, (5,), torch.float32), make(rank, (3, 2), torch.float32).t(),
                   make(rank, (7,), torch.int32)]
        try:
            hvd.grouped_allreduce_(strided, op=hvd.Sum, name="reused")
            expect("grouped_in_place_reuse", False, "a non-contiguous tensor was accepted")
        except ValueError as e:
            expect("grouped_in_place_reuse", "contiguous" in str(e), str(e))
        tensors = [make(rank, shape, dtype) for shape, dtype in layouts[0]]
        first = hvd.grouped_allreduce_async_(tensors, op=hvd.Sum, name="reused")
        try:
            hvd.grouped_allreduce_async_([t.clone() for t in tensors], op=hvd.Sum, name="reused")
            expect("grouped_in_place_reuse", False, "a second call in flight under the same name was accepted")
        except ValueError as e:
            expect("grouped_in_place_reuse", "in flight" in str(e), str(e))
        want = [reference([make(r, shape, dtype) for r in range(size)], "Sum", dtype) for shape, dtype in layouts[0]]
        outs = hvd.synchronize(first)
        expect("grouped_in_place_reuse", all(same(o, w, w.dtype) for o, w in zip(outs, want)), "after the refusal")
        # allreduce_async_ of one tensor keeps its block the same way: under
        # one name, or none, with shapes and dtypes in turn; not contiguous
        singles = []
        for seed, (shape, dtype) in enumerate([((5,), torch.float32), ((2, 3), torch.float32),
                                               ((2, 3), torch.float64), ((5,), torch.float32)] * 2):
            for name in ("single", None):
                t = make(rank + seed, shape, dtype)
                out = hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum, name=name))
                expect("grouped_in_place_reuse", out is t, "single %d %s" % (seed, name))
                singles.append((t, reference([make(r + seed, shape, dtype) for r in range(size)], "Sum", dtype)))
        expect("grouped_in_place_reuse", all(same(t, w, w.dtype) for t, w in singles),
               [(t.tolist(), w.tolist()) for t, w in singles if not same(t, w, w.dtype)])
        try:
            hvd.allreduce_async_(make(rank, (3, 2), torch.float32).t(), op=hvd.Sum, name="single")
            expect("grouped_in_place_reuse", False, "a non-contiguous single tensor was accepted")
        except ValueError as e:
            expect("grouped_in_place_reuse", "contiguous" in str(e), str(e))

    guarded("grouped_in_place_reuse", in_place_group_reuse)

    # --- sparse allreduce: values and indices are allgathered
    dense = torch.zeros(6)
    dense[rank % 6] = 1.0 + rank
    dense[5] = 2.0
    sparse = dense.to_sparse()
    expected = sum([torch.zeros(6).index_fill_(0, torch.tensor([r % 6]), 1.0 + r) for r in range(size)])
    expected[5] += 2.0 * size
    for opname, op, scale in [("Sum", hvd.Sum, 1.0), ("Average", hvd.Average, 1.0 / size)]:
        handle = hvd.sparse_allreduce_async(sparse, name="sparse.%s" % opname, op=op)
        out = hvd.synchronize(handle)
        expect("sparse_allreduce", out.is_sparse and torch.allclose(out.to_dense(), expected * scale),
               "%s: %s" % (opname, out))

    # --- allgather: every dtype, a different first dimension on every rank
    for dtype in DTYPES:
        mine = make(rank, (rank + 1, 2), dtype)
        out = hvd.allgather(mine, name="ag.%s" % dtype)
        ref = torch.cat([make(r, (r + 1, 2), dtype) for r in range(size)])
        expect("allgather_dtypes", same(out, ref, dtype), "%s: %s" % (dtype, out))
    out = hvd.synchronize(hvd.allgather_async(torch.full((2,), rank)))
    expect("allgather_dtypes", torch.equal(out, torch.arange(size).repeat_interleave(2)), "async")
    outs = hvd.grouped_allgather([torch.full((1,), rank), torch.full((rank + 1, 2), float(rank))], name="gag")
    ref1 = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)])
    expect("grouped_allgather", torch.equal(outs[0], torch.arange(size)) and torch.equal(outs[1], ref1), str(outs))
    outs = hvd.synchronize(hvd.grouped_allgather_async([torch.full((1,), rank)]))
    expect("grouped_allgather", torch.equal(outs[0], torch.arange(size)), "async")

    # --- broadcast: every dtype from every root; in place and async
    for dtype in DTYPES:
        for root in range(size):
            mine = make(rank, (3, 2), dtype)
            out = hvd.broadcast(mine, root, name="bc.%s.%d" % (dtype, root))
            expect("broadcast_dtypes", same(out, make(root, (3, 2), dtype), dtype) and
                   torch.equal(mine, make(rank, (3, 2), dtype)), "%s root %d" % (dtype, root))
    root = size - 1
    t = torch.full((4,), float(rank))
    out = hvd.broadcast_(t, root, name="bc_")
    expect("broadcast_variants", out is t and torch.equal(t, torch.full((4,), float(root))), "broadcast_")
    t = torch.full((4,), float(rank))
    out = hvd.synchronize(hvd.broadcast_async(t, root))
    expect("broadcast_variants", torch.equal(out, torch.full((4,), float(root))) and t[0] == rank, "async")
    t = torch.full((4,), float(rank))
    out = hvd.synchronize(hvd.broadcast_async_(t, root))
    expect("broadcast_variants", out is t and torch.equal(t, torch.full((4,), float(root))), "async_")

    # --- alltoall: even split, explicit splits (list and tensor), async
    t = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    out = hvd.alltoall(t, name="a2a.even")
    ref = torch.cat([torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float32) + 100 * r for r in range(size)])
    expect("alltoall", isinstance(out, torch.Tensor) and torch.equal(out, ref), "even: %s" % (out,))
    splits = [(rank + d) % 2 + 1 for d in range(size)]
    rows = torch.cat([torch.tensor([100 * rank + 10 * d + k for k in range(splits[d])]) for d in range(size)])
    data = torch.stack([rows, -rows], 1).to(torch.int64)
    ref_rows = torch.cat([torch.tensor([100 * r + 10 * rank + k for k in range((r + rank) % 2 + 1)])
                          for r in range(size)])
    ref = torch.stack([ref_rows, -ref_rows], 1)
    ref_splits = torch.tensor([(r + rank) % 2 + 1 for r in range(size)], dtype=torch.int32)
    for kind, sp in [("list", splits), ("tensor", torch.tensor(splits, dtype=torch.int32))]:
        out, received = hvd.alltoall(data, splits=sp, name="a2a.%s" % kind)
        expect("alltoall", torch.equal(out, ref) and torch.equal(received, ref_splits),
               "%s: %s %s" % (kind, out, received))
    out, received = hvd.synchronize(hvd.alltoall_async(data, splits=splits))
    expect("alltoall", torch.equal(out, ref) and torch.equal(received, ref_splits), "async")
    for dtype in DTYPES:
        mine = make(rank, (size, 2), dtype)
        out = hvd.alltoall(mine, name="a2a.%s" % dtype)
        ref = torch.cat([make(r, (size, 2), dtype)[rank:rank + 1] for r in range(size)])
        expect("alltoall", same(out, ref, dtype), "%s" % dtype)

    # --- reducescatter: Sum and Average, uneven first dimension, async, grouped
    nrows = 2 * size + 1
    base, extra = divmod(nrows, size)
    start = rank * base + min(rank, extra)
    count = base + (1 if rank < extra else 0)
    inputs = [make(r, (nrows, 2), torch.float32) for r in range(size)]
    total = torch.stack(inputs).sum(0)
    out = hvd.reducescatter(inputs[rank], op=hvd.Sum, name="rs.sum")
    expect("reducescatter", torch.allclose(out, total[start:start + count]), "Sum: %s" % out)
    out = hvd.reducescatter(inputs[rank], name="rs.avg")
    expect("reducescatter", torch.allclose(out, total[start:start + count] / size), "default Average: %s" % out)
    out = hvd.synchronize(hvd.reducescatter_async(inputs[rank], op=hvd.Sum))
    expect("reducescatter", torch.allclose(out, total[start:start + count]), "async")
    for dtype in (torch.int32, torch.float64, torch.bfloat16):
        ins = [make(r, (nrows, 2), dtype) for r in range(size)]
        out = hvd.reducescatter(ins[rank], op=hvd.Sum, name="rs.%s" % dtype)
        expect("reducescatter", same(out, reference(ins, "Sum", dtype)[start:start + count], dtype), str(dtype))
    outs = hvd.grouped_reducescatter([inputs[rank], inputs[rank] * 2], op=hvd.Sum, name="grs")
    expect("grouped_reducescatter", torch.allclose(outs[0], total[start:start + count]) and
           torch.allclose(outs[1], 2 * total[start:start + count]), str(outs))
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([inputs[rank]], op=hvd.Sum))
    expect("grouped_reducescatter", torch.allclose(outs[0], total[start:start + count]), "async")

    # --- autograd
    def grad_of(fn, x):
        x = x.clone().requires_grad_()
        fn(x).backward()
        return x.grad

    w = float(rank + 1)
    g = grad_of(lambda x: (hvd.allreduce(x, op=hvd.Sum) * w).sum(), torch.ones(3))
    expect("autograd_allreduce", torch.allclose(g, torch.full((3,), float(sum(range(1, size + 1))))), "Sum: %s" % g)
    g = grad_of(lambda x: (hvd.allreduce(x) * w).sum(), torch.ones(3))
    expect("autograd_allreduce", torch.allclose(g, torch.full((3,), (size + 1) / 2.0)), "Average: %s" % g)
    g = grad_of(lambda x: (hvd.grouped_allreduce([x, x * 2], op=hvd.Sum)[1] * w).sum(), torch.ones(2))
    expect("autograd_allreduce", torch.allclose(g, torch.full((2,), 2.0 * sum(range(1, size + 1)))), "grouped: %s" % g)

    total_rows = sum(r + 1 for r in range(size))
    offset = sum(r + 1 for r in range(rank))
    weights = torch.arange(total_rows, dtype=torch.float32).unsqueeze(1).expand(total_rows, 2)
    g = grad_of(lambda x: (hvd.allgather(x) * weights).sum(), torch.ones(rank + 1, 2))
    expect("autograd_allgather", torch.allclose(g, weights[offset:offset + rank + 1]), "%s" % g)
    g = grad_of(lambda x: (hvd.grouped_allgather([x])[0] * weights).sum(), torch.ones(rank + 1, 2))
    expect("autograd_allgather", torch.allclose(g, weights[offset:offset + rank + 1]), "grouped: %s" % g)

    for root in range(size):
        g = grad_of(lambda x: (hvd.broadcast(x, root) * w).sum(), torch.ones(3))
        want = (size + 1) / 2.0 if rank == root else 0.0
        expect("autograd_broadcast", torch.allclose(g, torch.full((3,), want)), "root %d: %s" % (root, g))

    def alltoall_loss(x):
        out, _ = hvd.alltoall(x, splits=splits)
        return (out * w).sum()
    g = grad_of(alltoall_loss, data.float())
    want = torch.cat([torch.full((splits[d], 2), float(d + 1)) for d in range(size)])
    expect("autograd_alltoall", torch.allclose(g, want), "%s" % g)

    block_of_row = torch.tensor([max(d for d in range(size) if d * base + min(d, extra) <= i) for i in range(nrows)])
    # Horovod's convention (as its allreduce gradient): Sum scales the gathered
    # gradient by the set size, Average leaves it undivided
    for opname, op, scale in [("Sum", hvd.Sum, float(size)), ("Average", hvd.Average, 1.0)]:
        g = grad_of(lambda x: (hvd.reducescatter(x, op=op) * w).sum(), torch.ones(nrows, 2))
        want = ((block_of_row + 1).float() * scale).unsqueeze(1).expand(nrows, 2)
        expect("autograd_reducescatter", torch.allclose(g, want), "%s: %s" % (opname, g))
    g = grad_of(lambda x: (hvd.grouped_reducescatter([x], op=hvd.Sum)[0] * w).sum(), torch.ones(nrows, 2))
    expect("autograd_reducescatter", torch.allclose(g, (block_of_row + 1).float().unsqueeze(1).expand(nrows, 2) * size),
           "grouped: %s" % g)

    # --- process sets: a set registered at init, used only by its members
    members = list(range(0, size, 2))
    expect("process_sets", even_ranks.included() == (rank in members), "included")
    if rank in members:
        out = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, process_set=even_ranks, name="ps")
        expect("process_sets", out.item() == float(sum(members)), "allreduce %s" % out)
        out = hvd.allgather(torch.tensor([rank]), process_set=even_ranks)
        expect("process_sets", out.tolist() == members, "allgather %s" % out)
        # root_rank is a global rank (at 3 ranks: 2, the set's second member)
        out = hvd.broadcast(torch.tensor([rank]), root_rank=members[-1], process_set=even_ranks)
        expect("process_sets", out.item() == members[-1], "broadcast %s" % out)
        obj = hvd.broadcast_object({"from": rank}, root_rank=members[-1], process_set=even_ranks)
        expect("process_sets", obj == {"from": members[-1]}, "broadcast_object %s" % obj)
        params = {"w": torch.full((2,), float(rank))}
        hvd.broadcast_parameters(params, root_rank=members[-1], process_set=even_ranks)
        expect("process_sets", params["w"].tolist() == [float(members[-1])] * 2, "broadcast_parameters %s" % params)
        # The gradient flows back to the root only: the global rank members[-1].
        x = torch.ones(3, requires_grad=True)
        hvd.broadcast(x, root_rank=members[-1], process_set=even_ranks).sum().backward()
        want = 1.0 if rank == members[-1] else 0.0
        expect("process_sets", torch.equal(x.grad, torch.full((3,), want)), "broadcast gradient %s" % x.grad)
        out = hvd.reducescatter(torch.ones(len(members), 1), op=hvd.Sum, process_set=even_ranks)
        expect("process_sets", out.tolist() == [[float(len(members))]], "reducescatter %s" % out)
        hvd.barrier(process_set=even_ranks)
    expect("process_sets", torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after_ps"),
                                       torch.full((1,), float(size))), "global set still works")

    # --- horovod.torch and horovod.common share one engine state
    expect("shared_state", hvd_common.is_initialized() and hvd_common.rank() == rank and hvd_common.size() == size,
           "horovod.common does not see the engine horovod.torch initialised")
    out = hvd_common.allreduce(np.ones(2, np.float32), op=hvd_common.Sum, name="numpy_side")
    expect("shared_state", out.tolist() == [float(size)] * 2, "numpy allreduce %s" % out)

    # --- barrier and join
    hvd.barrier()
    if rank == size - 1:
        time.sleep(0.3)  # join last, so the result is known
    last = hvd.join()
    expect("join", last == size - 1, "join returned %r" % last)

    return report


def cuda_tensors_and_training():
    """Collectives, training and torch.compile on CUDA tensors; returns {check: passed}."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    report = {}
    x = torch.full((4, 2), float(rank + 1), device=device)
    total = float(sum(range(1, size + 1)))
    out = hvd.allreduce(x, op=hvd.Sum)
    report["allreduce"] = out.device == device and out.eq(total).all().item()
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum)
    report["allreduce_"] = y.eq(total).all().item()
    y = x.clone()
    hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum))
    report["allreduce_async_"] = y.eq(total).all().item()
    out = hvd.allgather(x)
    report["allgather"] = out.device == device and out.shape == (4 * size, 2)
    y = x.clone()
    hvd.broadcast_(y, root_rank=0)
    report["broadcast_"] = y.eq(1.0).all().item()
    out = hvd.reducescatter(torch.ones(size, 2, device=device), op=hvd.Sum)
    report["reducescatter"] = out.device == device and out.eq(float(size)).all().item()
    out = hvd.alltoall(torch.arange(size, device=device).float())
    report["alltoall"] = out.device == device and out.eq(float(rank)).all().item()
    g = x.clone().requires_grad_()
    hvd.allreduce(g, op=hvd.Sum).sum().backward()
    report["autograd"] = g.grad.device == device and g.grad.eq(float(size)).all().item()
    for dtype in (torch.float16, torch.bfloat16, torch.int64):
        out = hvd.allreduce(torch.full((3,), rank + 1, dtype=dtype, device=device), op=hvd.Sum, name="dt%s" % dtype)
        report["allreduce_%s" % dtype] = out.dtype == dtype and out.device == device and out.eq(total).all().item()
    report["adasum"] = hvd.allreduce(torch.tensor([1.0, -2.0], device=device), op=hvd.Adasum).tolist() == [1.0, -2.0]
    gathered = hvd.allgather_object({"rank": rank})
    report["allgather_object"] = [o["rank"] for o in gathered] == list(range(size))

    # Training a CUDA model: parameters broadcast from rank 0, gradients averaged
    # by DistributedOptimizer; every rank ends with the same parameters, equal to
    # one process stepping on the mean gradient.
    torch.manual_seed(rank)  # different initial weights: the broadcast must fix them
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # rank 0's weights everywhere
    reference = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())  # names for the allreduces
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    data = torch.randn(size, 4, 8, generator=torch.Generator().manual_seed(3)).to(device)
    target = torch.randn(size, 4, 1, generator=torch.Generator().manual_seed(4)).to(device)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(data[rank]), target[rank]).backward()
    opt.step()
    ref_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    with torch.no_grad():
        for p, r in zip(ref_model.parameters(), reference):
            p.copy_(r)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9)
    # The mean of the ranks' losses has the mean gradient.
    sum(torch.nn.functional.mse_loss(ref_model(data[r]), target[r]) for r in range(size)).div(size).backward()
    ref_opt.step()
    report["optimizer"] = all(p.device == device and torch.allclose(p, q, atol=1e-6)
                              for p, q in zip(model.parameters(), ref_model.parameters()))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0))
    report["replicas_equal"] = all(torch.equal(everyone[0], e) for e in everyone)

    # torch.compile with a collective inside, on CUDA tensors.
    step = torch.compile(lambda t: hvd.allreduce(t * 2, op=hvd.Sum) + 1, fullgraph=True)
    report["compile"] = step(x).eq(2 * total + 1).all().item()
    return report
