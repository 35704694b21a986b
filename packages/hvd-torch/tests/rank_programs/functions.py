# functions.py - rank side of test_functions.py: broadcast_parameters,
# broadcast_optimizer_state, broadcast_object and allgather_object, with a
# root that is not always rank 0 and per-rank differences in every input.
"""Rank programs for test_functions.py."""

import copy

import torch
import torch.nn.functional as F

import horovod.torch as hvd

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)


def _make(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2))
    m[1].running_mean.add_(seed)  # buffers differ per rank too
    return m


def _same_everywhere(t, what):
    g = hvd.allgather(t.detach().reshape(1, -1).to(torch.float64).contiguous(), name="check." + what)
    assert all(torch.equal(g[0], x) for x in g), what


def _params_equal_root(model, root_model, what):
    for (n, a), (_, b) in zip(model.state_dict().items(), root_model.state_dict().items()):
        assert torch.equal(a, b), (what, n)


def _optimizer_state(opt):
    out = []
    for p in [p for g in opt.param_groups for p in g["params"]]:
        for k, v in sorted(opt.state.get(p, {}).items()):
            out.append((k, v.clone() if torch.is_tensor(v) else v))
    return out


def _take_steps(model, opt, n, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        opt.zero_grad()
        F.mse_loss(model(torch.randn(8, 4, generator=g)), torch.randn(8, 2, generator=g)).backward()
        opt.step()


def _broadcast_parameters(rank, root):
    # state_dict(), named_parameters(), parameters()
    root_model = _make(root)
    for how in ("state_dict", "named_parameters", "parameters"):
        model = _make(rank)
        arg = {"state_dict": lambda: model.state_dict(),
               "named_parameters": lambda: list(model.named_parameters()),
               "parameters": lambda: list(model.parameters())}[how]()
        hvd.broadcast_parameters(arg, root_rank=root)
        if how == "state_dict":
            _params_equal_root(model, root_model, how)
        else:
            for a, b in zip(model.parameters(), root_model.parameters()):
                assert torch.equal(a, b), how
        assert all(p.requires_grad for p in model.parameters())
    try:
        hvd.broadcast_parameters(model.parameters(), root_rank=0)  # a generator: Horovod's ValueError
        raise RuntimeError("generator accepted")
    except ValueError:
        pass


def _broadcast_optimizer_state(rank, root):
    # The root has stepped, the others have not (fresh state); hyper-parameters
    # differ per rank, including a tuple and an int.
    for kind in ("adam", "sgd", "distributed", "frozen"):
        model = _make(0)
        if kind == "frozen":
            model[0].bias.requires_grad_(False)  # never gets state
        params = [p for p in model.parameters()]
        if kind == "sgd":
            opt = torch.optim.SGD(params, lr=0.1 + rank, momentum=0.5 + 0.1 * rank, nesterov=rank == root)
        else:
            opt = torch.optim.Adam(params, lr=0.01 * (rank + 1), betas=(0.8 + 0.01 * rank, 0.99),
                                   amsgrad=rank == root)
        if kind == "distributed":
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())  # names for the allreduces
        # only the root steps (a DistributedOptimizer cannot step alone: it
        # starts fresh everywhere, exercising the state initialisation)
        if rank == root and kind != "distributed":
            _take_steps(model, opt, 3, seed=rank)
        hvd.broadcast_optimizer_state(opt, root_rank=root)
        mine = _optimizer_state(opt)
        root_state = hvd.broadcast_object(mine, root_rank=root, name="check.state")
        assert len(mine) == len(root_state), (kind, len(mine), len(root_state))
        for (k, v), (k2, v2) in zip(mine, root_state):
            assert k == k2, (k, k2)
            assert type(v) is type(v2) and (torch.equal(v, v2) if torch.is_tensor(v) else v == v2), (kind, k, v, v2)
        groups = hvd.broadcast_object([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
                                      root_rank=root, name="check.groups")
        for g, want in zip(opt.param_groups, groups):
            for k, v in want.items():
                assert type(g[k]) is type(v) and g[k] == v, (kind, k, g[k], v)
        if kind == "frozen":
            assert model[0].bias not in opt.state
        # a step afterwards keeps all replicas identical (given identical params and grads)
        hvd.broadcast_parameters(model.state_dict(), root_rank=root)
        g = torch.Generator().manual_seed(99)
        opt.zero_grad()
        F.mse_loss(model(torch.randn(8, 4, generator=g)), torch.randn(8, 2, generator=g)).backward()
        opt.step()
        for p in model.parameters():
            _same_everywhere(p, kind)


def _fresh_and_stateless_optimizers(rank):
    # a fresh optimizer everywhere: nothing moves, no step is counted
    model = _make(0)
    model[2].bias.requires_grad_(False)
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for n, v in model.state_dict().items():
        assert torch.equal(v, before[n]), n
    # as after Horovod's initialisation step (scripts read or broadcast these):
    # zero gradients on trainable parameters, none on frozen ones
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.shape == p.shape and not p.grad.any(), n
        else:
            assert p.grad is None, n
    hvd.broadcast(model[0].weight.grad, root_rank=0, name="check.zero_grad")
    assert len(opt.state_dict()["state"]) == 0
    # ranks with state, root without: the state follows the root's (none)
    if rank != 0:
        _take_steps(model, opt, 1, seed=rank)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert len(opt.state_dict()["state"]) == 0
    # stateless optimizer: nothing to broadcast but hyper-parameters
    opt = torch.optim.SGD(model.parameters(), lr=0.3 + rank)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.3
    try:
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)
        raise RuntimeError("LBFGS accepted")
    except ValueError:
        pass


def _broadcast_and_allgather_objects(rank, size, root):
    obj = {"rank": rank, "f": (lambda v: v + rank), "t": torch.arange(3) * rank} if rank == root else None
    got = hvd.broadcast_object(obj, root_rank=root)
    assert got["rank"] == root and got["f"](1) == 1 + root and torch.equal(got["t"], torch.arange(3) * root)
    assert hvd.broadcast_object("x" * rank * 1000, root_rank=0, name="named") == ""
    objs = hvd.allgather_object({"rank": rank, "payload": "y" * (rank * 37)})
    assert [o["rank"] for o in objs] == list(range(size))
    assert [len(o["payload"]) for o in objs] == [r * 37 for r in range(size)]
    assert hvd.allgather_object(None, name="nones") == [None] * size


def every_function_check():
    """Runs every check in order (an assertion fails the rank); returns the names of those that passed."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    root = size - 1  # not always 0
    done = []
    _broadcast_parameters(rank, root)
    done.append("broadcast_parameters")
    _broadcast_optimizer_state(rank, root)
    done.append("broadcast_optimizer_state")
    _fresh_and_stateless_optimizers(rank)
    done.append("fresh_and_stateless")
    _broadcast_and_allgather_objects(rank, size, root)
    done.append("objects")
    return done
