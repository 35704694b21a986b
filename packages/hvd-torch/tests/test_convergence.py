# test_convergence.py - data-parallel training must be the same computation
# as single-process training on the whole batch: N ranks, each with its
# shard of every batch, wrapped in DistributedOptimizer (and SyncBatchNorm
# for a model with batch norm), end with the parameters that one process
# gets on the concatenated batches from the same seed. Every rank also runs
# that single-process reference itself and compares (to 1e-5).
import pytest

from optimizer_ranks import run_ok

CONVERGENCE = r"""
import torch.nn.functional as F

rank, size = hvd.rank(), hvd.size()
PER_RANK, STEPS = 8, 25

def mlp():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 3))

def convnet(bn):
    # No conv bias: batch norm cancels it, its true gradient is 0, and Adam
    # would amplify the rounding noise in it into visible differences.
    torch.manual_seed(4321)
    return torch.nn.Sequential(torch.nn.Conv1d(2, 6, 3, padding=1, bias=False), bn(6), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(6 * 12, 3))

def batches(in_shape):
    g = torch.Generator().manual_seed(99)
    for _ in range(STEPS):
        x = torch.randn((PER_RANK * size,) + in_shape, generator=g)
        y = torch.randint(0, 3, (PER_RANK * size,), generator=g)
        yield x, y

def train(model, opt, in_shape, shard):
    for x, y in batches(in_shape):
        if shard:
            x, y = x[rank * PER_RANK:(rank + 1) * PER_RANK], y[rank * PER_RANK:(rank + 1) * PER_RANK]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model

def compare(a, b, what):
    worst = 0.0
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        if p.dtype.is_floating_point:
            worst = max(worst, (p - q).abs().max().item())
            assert torch.allclose(p, q, atol=1e-5, rtol=0), (what, n, (p - q).abs().max().item())
        else:
            assert torch.equal(p, q), (what, n)
    return worst

report = {}
# 1. MLP, SGD with momentum and weight decay
ref = mlp()
train(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4), (10,), shard=False)
model = mlp()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4),
                               named_parameters=model.named_parameters())  # names for the allreduces
hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # identical start on every rank
report["mlp_sgd"] = compare(train(model, opt, (10,), shard=True), ref, "mlp_sgd")
moved = max((p - q).abs().max().item() for p, q in zip(model.parameters(), mlp().parameters()))
assert moved > 1e-2, "training did not move the parameters"

# 2. conv net with (Sync)BatchNorm, Adam, gradient groups
ref = convnet(torch.nn.BatchNorm1d)
train(ref, torch.optim.Adam(ref.parameters(), lr=0.01), (2, 12), shard=False)
model = convnet(hvd.SyncBatchNorm)
opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters(), groups=2)
hvd.broadcast_optimizer_state(opt, root_rank=0)
report["conv_syncbn_adam"] = compare(train(model, opt, (2, 12), shard=True), ref, "conv_syncbn_adam")
print(json.dumps(report))
"""


@pytest.mark.parametrize("size", [2, 3])
def test_data_parallel_training_equals_single_process_on_the_whole_batch(size):
    for report in run_ok(size, CONVERGENCE, timeout=180):
        assert set(report) == {"mlp_sgd", "conv_syncbn_adam"}
        assert all(v <= 1e-5 for v in report.values()), report
