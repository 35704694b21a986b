# fastcall.py - rank side of test_fastcall.py: repeated small allreduces of
# torch tensors, which hvd-core's C accelerator finds in its table of
# argument blocks, told apart by every argument; the tensors it must leave
# to the Python path; a mismatch and an interrupt met there.
"""Rank programs for test_fastcall.py."""

import os

import torch

import horovod.torch as hvd
from horovod.common import engine_calls, testing

torch.set_num_threads(1)  # ranks share two cores


class _TableHits:
    """Wraps the loaded accelerator and counts the run_cached calls that
    found their block (returned something other than None), and the
    submit_cached calls that enqueued one (returned a handle)."""

    # Counted function -> (the attribute its hits add to, whether an outcome is a hit).
    COUNTED = {"run_cached": ("hits", lambda outcome: outcome is not None),
               "submit_cached": ("async_hits", lambda outcome: type(outcome) is int)}

    def __init__(self, module):
        self.module, self.hits, self.async_hits = module, 0, 0

    def __getattr__(self, name):
        function = getattr(self.module, name)
        if name not in self.COUNTED:
            return function
        attribute, is_hit = self.COUNTED[name]

        def counted(*args):
            outcome = function(*args)
            setattr(self, attribute, getattr(self, attribute) + is_hit(outcome))
            return outcome
        return counted


def table_takes_plain_tensors(repeats=3):
    """Calls that differ from the first in one thing only, each made
    `repeats` times in a row. Returns, per case: [label, whether every
    result was right, the table hits over the case]."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    engine_calls._fast = counter = _TableHits(engine_calls.fastcall())
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + rank
    total = sum(torch.arange(6, dtype=torch.float64).reshape(2, 3) + r for r in range(size)).float()
    graded = x.clone().requires_grad_()
    parameter = torch.nn.Parameter(x.clone(), requires_grad=False)

    def in_place(tensor, **kwargs):
        copy = tensor.clone()
        out = hvd.allreduce_(copy, name="k", **kwargs)
        return out if out is copy else None  # allreduce_ returns the tensor it was given

    def with_gradient():
        graded.grad = None
        out = hvd.allreduce(graded, op=hvd.Sum, name="k")
        out.sum().backward()
        # Through autograd, and the gradient of a sum is the sum of the ranks' ones.
        right = out.grad_fn is not None and torch.equal(graded.grad, torch.full_like(x, float(size)))
        return out if right else None

    def refused_view():
        try:
            hvd.allreduce(x.t(), op=hvd.Sum, name="k")
        except ValueError:  # Horovod's torch binding needs contiguous tensors
            return total
        return None

    def no_grad_mode():
        with torch.no_grad():
            return hvd.allreduce(graded, op=hvd.Sum, name="k")

    cases = [
        ("sum", lambda: hvd.allreduce(x, op=hvd.Sum, name="k"), total),
        ("equal name, another string", lambda: hvd.allreduce(x, op=hvd.Sum, name="".join(["k", ""])), total),
        ("average by default", lambda: hvd.allreduce(x, name="k"), total / size),
        ("prescale", lambda: hvd.allreduce(x, op=hvd.Sum, name="k", prescale_factor=2.0), 2 * total),
        ("postscale", lambda: hvd.allreduce(x, op=hvd.Sum, name="k", postscale_factor=0.5), total / 2),
        ("min", lambda: hvd.allreduce(x, op=hvd.Min, name="k"), x - rank),
        ("shape", lambda: hvd.allreduce(x.reshape(3, 2), op=hvd.Sum, name="k"), total.reshape(3, 2)),
        ("float64", lambda: hvd.allreduce(x.double(), op=hvd.Sum, name="k"), total.double()),
        ("bfloat16", lambda: hvd.allreduce(x.bfloat16(), op=hvd.Sum, name="k"), total.bfloat16()),
        ("int32", lambda: hvd.allreduce(x.int(), op=hvd.Sum, name="k"), total.int()),
        ("zero dimensions", lambda: hvd.allreduce(x[1, 2].clone(), op=hvd.Sum, name="k"), total[1, 2]),
        ("other name", lambda: hvd.allreduce(x, op=hvd.Sum, name="k2"), total),
        ("no name", lambda: hvd.allreduce(x, op=hvd.Sum), total),
        ("in place", lambda: in_place(x, op=hvd.Sum), total),
        ("in place, average", lambda: in_place(x), total / size),
        # Left to the Python path: autograd, a subclass, a strided view, no elements.
        ("requires grad", with_gradient, total),
        ("requires grad, no_grad mode", no_grad_mode, total),
        ("parameter", lambda: hvd.allreduce(parameter, op=hvd.Sum, name="k"), total),
        ("not contiguous, refused", refused_view, total),
        ("no elements", lambda: hvd.allreduce(x[:0], op=hvd.Sum, name="k"), total[:0]),
    ]
    outcomes = []
    for label, call, expected in cases:
        before = counter.hits
        results = [call() for _ in range(repeats)]
        right = all(type(r) is torch.Tensor and r.dtype == expected.dtype and r.shape == expected.shape
                    and torch.equal(r.detach(), expected) for r in results)
        outcomes.append([label, right, counter.hits - before])
    # More distinct calls than the table has places: evicted blocks are made again.
    before = counter.hits
    right = all(torch.equal(hvd.allreduce(x + i, op=hvd.Sum, name="n%d" % i), total + size * i)
                for i in range(200) for _ in range(2))
    outcomes.append(["200 names", right, counter.hits - before])
    # Out of place: a new tensor each time, the input left as it was.
    first, second = hvd.allreduce(x, op=hvd.Sum, name="k"), hvd.allreduce(x, op=hvd.Sum, name="k")
    untouched = torch.equal(x, torch.arange(6, dtype=torch.float32).reshape(2, 3) + rank)
    outcomes.append(["new result, input untouched", untouched and first.data_ptr() != second.data_ptr()
                     and first.data_ptr() != x.data_ptr(), 0])
    hvd.shutdown()
    return outcomes


def async_in_place_from_the_table():
    """allreduce_async_ (one tensor, in place) made again: the block its
    first call left in the table is enqueued from C. Returns, per case:
    [label, whether every result was right, the table's hits over it]."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    engine_calls._fast = counter = _TableHits(engine_calls.fastcall())
    outcomes = []

    def case(label, run):
        before = counter.async_hits
        outcomes.append([label, bool(run()), counter.async_hits - before])

    # A model's worth of gradients, more than the table's 64 places of old:
    # each submitted under its name, then all synchronized, three times.
    grads = [torch.empty(i % 5 + 1, 3) for i in range(200)]

    def gradients():
        right = True
        for _ in range(3):
            for i, g in enumerate(grads):
                g.fill_(float(rank + i))
            handles = [hvd.allreduce_async_(g, name="g%d" % i, op=hvd.Sum) for i, g in enumerate(grads)]
            right &= all(type(h) is int for h in handles)
            results = [hvd.synchronize(h) for h in handles]
            right &= all(r is g and torch.equal(g, torch.full_like(g, float(size * i + size * (size - 1) // 2)))
                         for i, (r, g) in enumerate(zip(results, grads)))
        return right
    case("200 names", gradients)

    x = torch.empty(2, 3)
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    total = sum(base + r for r in range(size))

    def repeated(expected, **kwargs):
        def run():
            right = True
            for _ in range(3):
                x.copy_(base + rank)
                right &= hvd.synchronize(hvd.allreduce_async_(x, name="k", **kwargs)) is x and torch.equal(x, expected)
            return right
        return run
    case("sum", repeated(total, op=hvd.Sum))
    case("average by default", repeated(total / size))
    case("prescale", repeated(2 * total, op=hvd.Sum, prescale_factor=2.0))
    case("postscale", repeated(total / 2, op=hvd.Sum, postscale_factor=0.5))
    case("sum again", repeated(total, op=hvd.Sum))

    unnamed = [torch.empty(4) for _ in range(5)]

    def several_unnamed_in_flight():
        right = True
        for _ in range(3):
            for j, u in enumerate(unnamed):
                u.fill_(float(rank * 10 + j))
            handles = [hvd.allreduce_async_(u, op=hvd.Sum) for u in unnamed]
            for h in handles:
                hvd.synchronize(h)
            right &= all(torch.equal(u, torch.full((4,), float(sum(r * 10 + j for r in range(size)))))
                         for j, u in enumerate(unnamed))
        return right
    case("unnamed, five in flight", several_unnamed_in_flight)

    def same_name_in_flight():
        a, b = torch.ones(3), torch.ones(3)
        hvd.synchronize(hvd.allreduce_async_(a, name="dup", op=hvd.Sum))
        a.fill_(1.0)
        first = hvd.allreduce_async_(a, name="dup", op=hvd.Sum)  # from the table
        try:
            hvd.allreduce_async_(b, name="dup", op=hvd.Sum)
            refused = False
        except ValueError as e:
            refused = "allreduce.dup" in str(e) and "in flight" in str(e)
        hvd.synchronize(first)
        a.fill_(1.0)
        again = hvd.synchronize(hvd.allreduce_async_(a, name="dup", op=hvd.Sum))  # the name is free again
        return (refused and again is a and torch.equal(a, torch.full((3,), float(size)))
                and torch.equal(b, torch.ones(3)))
    case("same name in flight, refused", same_name_in_flight)

    def left_to_python():
        strided = torch.zeros(3, 2).t()
        try:
            hvd.allreduce_async_(strided, name="strided", op=hvd.Sum)
            return False
        except ValueError:  # Horovod's torch binding needs contiguous tensors
            return True
    case("not contiguous, refused", left_to_python)

    def optimizer_per_tensor():
        # DistributedOptimizer with every gradient on its own: the step's
        # last one is submitted for a caller that waits at once (its own
        # block). Checked against plain SGD on gradients averaged by hand.
        def model():
            torch.manual_seed(7)
            return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        net, ref = model(), model()
        os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = "0"
        try:
            opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                           named_parameters=net.named_parameters())
        finally:
            os.environ.pop("HOROVOD_GRADIENT_BUCKET_MB")
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(3):
            x = torch.full((2, 4), float(rank + step))
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
            ref_opt.zero_grad()
            ref(x).sum().backward()
            for i, p in enumerate(ref.parameters()):
                p.grad = hvd.allreduce(p.grad, name="ref.%d" % i)
            ref_opt.step()
        return all(torch.allclose(a, b) for a, b in zip(net.parameters(), ref.parameters()))
    case("optimizer, per-tensor", optimizer_per_tensor)

    hvd.shutdown()
    try:
        hvd.allreduce_async_(x, name="k", op=hvd.Sum)
        after_shutdown = None
    except ValueError as e:
        after_shutdown = str(e)
    outcomes.append(["after shutdown", after_shutdown is not None and "hvd.init()" in after_shutdown, 0])
    return outcomes


def mismatch_after_table_hits():
    """Both ranks repeat one allreduce (so it is in the table), then rank 1
    changes its shape under the same name: rank 0's call, made from the
    table, must fail as rank 1's does. Returns what each call raised and the
    engine's next result."""
    hvd.init()
    rank = hvd.rank()
    engine_calls._fast = counter = _TableHits(engine_calls.fastcall())
    report = {}
    for _ in range(3):
        hvd.allreduce(torch.ones(4), op=hvd.Sum, name="t")
    report["hits before"] = counter.hits
    try:
        hvd.allreduce(torch.ones(4 + rank), op=hvd.Sum, name="t")
        report["raised"] = None
    except hvd.HorovodInternalError as e:
        report["raised"] = [type(e).__module__ + "." + type(e).__name__, str(e)]
    report["hits"] = counter.hits
    report["after"] = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after").tolist()
    hvd.shutdown()
    return report


def interrupted_in_a_repeated_allreduce(marker_dir, in_place):
    """Rank 0 makes an allreduce from the table and is interrupted (SIGINT)
    while rank 1 has not submitted it yet. Returns how long the interrupt
    took, what the operation in flight keeps alive, and the results."""
    hvd.init()
    rank = hvd.rank()
    engine_calls._fast = counter = _TableHits(engine_calls.fastcall())
    x = torch.arange(4, dtype=torch.float32) + rank
    out = {}

    def late():
        if in_place:
            hvd.allreduce_(x, op=hvd.Sum, name="late")
        else:
            out["reduced"] = hvd.allreduce(x, op=hvd.Sum, name="late").tolist()
    late()  # once before: the block is in the table now (x is summed in place)
    out.clear()
    hits = counter.hits
    waited = testing.interrupt_first_rank(late, rank, marker_dir)
    if rank == 0:
        out["interrupted"] = waited is not None
        if waited is not None:
            out["waited"] = waited
            out["kept"] = [[list(t.shape) if isinstance(t, torch.Tensor) else t for t in kept]
                           for kept in engine_calls._abandoned.values()]
    out["from the table"] = counter.hits - hits
    # Rank 0's interrupted operation completed once rank 1 submitted it.
    out["after"] = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after").tolist()
    out["x"] = x.tolist()
    hvd.shutdown()
    return out
