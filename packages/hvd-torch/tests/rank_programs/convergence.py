# convergence.py - rank side of test_convergence.py: each rank trains on its
# shard of every batch through DistributedOptimizer (and SyncBatchNorm), and
# also trains the single-process reference on the whole batches itself, then
# compares the two.
"""Rank programs for test_convergence.py."""

import torch
import torch.nn.functional as F

import horovod.torch as hvd

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)

PER_RANK, STEPS = 8, 25


def _mlp():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 3))


def _convnet(bn):
    # No conv bias: batch norm cancels it, its true gradient is 0, and Adam
    # would amplify the rounding noise in it into visible differences.
    torch.manual_seed(4321)
    return torch.nn.Sequential(torch.nn.Conv1d(2, 6, 3, padding=1, bias=False), bn(6), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(6 * 12, 3))


def _batches(in_shape):
    size = hvd.size()
    g = torch.Generator().manual_seed(99)
    for _ in range(STEPS):
        x = torch.randn((PER_RANK * size,) + in_shape, generator=g)
        y = torch.randint(0, 3, (PER_RANK * size,), generator=g)
        yield x, y


def _train(model, opt, in_shape, shard):
    rank = hvd.rank()
    for x, y in _batches(in_shape):
        if shard:
            x, y = x[rank * PER_RANK:(rank + 1) * PER_RANK], y[rank * PER_RANK:(rank + 1) * PER_RANK]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model


def _compare(a, b, what):
    worst = 0.0
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        if p.dtype.is_floating_point:
            worst = max(worst, (p - q).abs().max().item())
            assert torch.allclose(p, q, atol=1e-5, rtol=0), (what, n, (p - q).abs().max().item())
        else:
            assert torch.equal(p, q), (what, n)
    return worst


def data_parallel_training_matches_single_process():
    """Trains both ways (an assertion fails the rank); returns {model: largest parameter difference}."""
    hvd.init()
    report = {}
    # 1. MLP, SGD with momentum and weight decay
    ref = _mlp()
    _train(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4), (10,), shard=False)
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4),
                                   named_parameters=model.named_parameters())  # names for the allreduces
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # identical start on every rank
    report["mlp_sgd"] = _compare(_train(model, opt, (10,), shard=True), ref, "mlp_sgd")
    moved = max((p - q).abs().max().item() for p, q in zip(model.parameters(), _mlp().parameters()))
    assert moved > 1e-2, "training did not move the parameters"

    # 2. conv net with (Sync)BatchNorm, Adam, gradient groups
    ref = _convnet(torch.nn.BatchNorm1d)
    _train(ref, torch.optim.Adam(ref.parameters(), lr=0.01), (2, 12), shard=False)
    model = _convnet(hvd.SyncBatchNorm)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), groups=2)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    report["conv_syncbn_adam"] = _compare(_train(model, opt, (2, 12), shard=True), ref, "conv_syncbn_adam")
    return report
