# compile.py - rank side of test_compile.py: a training-step shaped function
# with hvd collectives, eager against torch.compile(fullgraph=True), and
# torch.library.opcheck on the hvd:: ops.
"""Rank programs for test_compile.py."""

import traceback

import torch

import horovod.torch as hvd

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)

# allgather's output has a data-dependent first dimension. Newer Dynamo allows
# that under fullgraph=True by itself; torch 2.4 (the oldest hvd-torch
# supports) needs the switch docs/torch.md tells users of older torch to set.
# 2.4 and 2.13 are the versions tested; the releases in between are not.
if tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13):
    torch._dynamo.config.capture_dynamic_output_shape_ops = True


def step(x, w):
    """Reduces, gathers and broadcasts inside one graph, as a training step would."""
    local = torch.tanh(x @ w)
    reduced = hvd.allreduce(local, op=hvd.Sum, name="step.reduced")
    averaged = hvd.allreduce(local)
    gathered = hvd.allgather(local, name="step.gathered")
    from_root = hvd.broadcast(w, root_rank=1, name="step.w")
    return reduced, averaged, gathered * 2, from_root + 1


def compiled_step_matches_eager():
    """Returns whether compiled forward (twice) and backward equal eager, and opcheck's failure per op (or None)."""
    hvd.init()
    rank = hvd.rank()
    report = {}
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 10 + rank
    w = torch.linspace(-1, 1, 8).reshape(4, 2) * (rank + 1)
    eager = step(x, w)
    compiled = torch.compile(step, fullgraph=True)
    outs = compiled(x, w)
    report["forward_equal"] = all(torch.allclose(a, b) for a, b in zip(eager, outs))
    outs2 = compiled(x + 1, w)  # a second call reuses the graph
    eager2 = step(x + 1, w)
    report["second_call_equal"] = all(torch.allclose(a, b) for a, b in zip(eager2, outs2))

    def loss_fn(x, w):
        reduced, averaged, gathered, from_root = step(x, w)
        return reduced.sum() + (averaged * (rank + 1)).sum() + gathered.sum() + (from_root * (rank + 1)).sum()

    def grads(fn):
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        fn(xg, wg).backward()
        return xg.grad, wg.grad

    eager_grads = grads(loss_fn)
    compiled_grads = grads(torch.compile(loss_fn, fullgraph=True))
    report["backward_equal"] = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(eager_grads, compiled_grads))

    ops = {}
    for name, args in [("allreduce", (torch.randn(3, requires_grad=True), hvd.Sum, "", 1.0, 1.0, 0)),
                       ("broadcast", (torch.randn(3, requires_grad=True), 0, "", 0)),
                       ("allgather", (torch.randn(2, 3, requires_grad=True), "", 0))]:
        torch.manual_seed(0)  # identical inputs on every rank: opcheck compares runs
        try:
            torch.library.opcheck(getattr(torch.ops.hvd, name).default, args)
            ops[name] = None
        except Exception:
            ops[name] = traceback.format_exc()
    report["opcheck"] = ops
    return report
