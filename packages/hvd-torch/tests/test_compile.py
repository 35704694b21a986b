# test_compile.py - hvd collectives inside torch.compile(fullgraph=True): no
# graph break, results and gradients equal to eager, at 2 real ranks. The
# ops are horovod.torch.custom_ops' hvd:: torch.library ops; torch.library's
# opcheck validates their schemas, fake kernels and autograd registration.
import torch_ranks

SCRIPT = r'''
import traceback
hvd.init()
rank, size = hvd.rank(), hvd.size()
report = {}

def step(x, w):
    # A training-step shaped function: reduce, gather and broadcast inside one graph.
    local = torch.tanh(x @ w)
    reduced = hvd.allreduce(local, op=hvd.Sum, name="step.reduced")
    averaged = hvd.allreduce(local)
    gathered = hvd.allgather(local, name="step.gathered")
    from_root = hvd.broadcast(w, root_rank=1, name="step.w")
    return reduced, averaged, gathered * 2, from_root + 1

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
print(json.dumps(report))
'''


def test_compiled_step_with_allreduce_allgather_broadcast_matches_eager(tmp_path):
    # A fresh compile cache: torch keys cached graphs on the forward graph
    # only, so a cached backward could predate a change to an op's autograd
    # formula. Compiling on two shared cores takes tens of seconds per rank.
    reports = torch_ranks.run_ok(2, SCRIPT, timeout=240, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    for rank, report in enumerate(reports):
        assert report["forward_equal"], (rank, report)
        assert report["second_call_equal"], (rank, report)
        assert report["backward_equal"], (rank, report)
        for op, failure in report["opcheck"].items():
            assert failure is None, "rank %d: opcheck hvd::%s\n%s" % (rank, op, failure)
