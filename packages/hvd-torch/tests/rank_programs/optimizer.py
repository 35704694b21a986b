# optimizer.py - rank side of test_optimizer.py: DistributedOptimizer's
# gradients and steps against an independent reference (the local gradients
# of a copy of the model, averaged with hvd.allreduce), one function per
# behaviour, all run in order by every_optimizer_check().
"""Rank programs for test_optimizer.py."""

import copy
import os
import warnings

import torch
import torch.nn.functional as F

import horovod.torch as hvd

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)


def _make(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _batch(step, r=None):
    g = torch.Generator().manual_seed(1000 * step + (hvd.rank() if r is None else r))
    return torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)


def _local_grads(model, batches):
    m = copy.deepcopy(model)
    for p in m.parameters():
        p.grad = None
    for x, y in batches:
        F.mse_loss(m(x), y).backward()
    return [p.grad.clone() for p in m.parameters()]


def _reference(model, batches, op=hvd.Average):
    return [hvd.allreduce(g, op=op, name="ref.%d" % i) for i, g in enumerate(_local_grads(model, batches))]


def _close(a, b, tol=1e-6):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype, (x.dtype, y.dtype)
        assert torch.allclose(x, y, atol=tol, rtol=tol), (x, y)


def _train_step(opt, model, batches, step=True):
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
    if step:
        opt.step()


def _wrapper_class_averages_and_steps(done):
    # 1. class, averaging, step applies the averaged gradient
    model = _make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())  # names for the allreduces
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD" and type(opt) is not torch.optim.SGD
    before = [p.detach().clone() for p in model.parameters()]
    want = _reference(model, [_batch(0)])
    _train_step(opt, model, [_batch(0)])
    _close([p.grad for p in model.parameters()], want)
    _close([p.detach() for p in model.parameters()], [b - 0.1 * g for b, g in zip(before, want)])
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    done.append("average")


def _param_groups_zero_grad_and_skip_synchronize(done):
    # 2. unnamed parameters, several param groups
    model = _make()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": params[:2]}, {"params": params[2:], "lr": 0.5}],
                                                   lr=0.1))
    want = _reference(model, [_batch(1)])
    _train_step(opt, model, [_batch(1)], step=False)
    opt.synchronize()
    _close([p.grad for p in model.parameters()], want)
    with opt.skip_synchronize():
        opt.step()
    done.append("param_groups")

    # 3. zero_grad() between backward and step: Horovod's AssertionError
    if hvd.size() > 1:
        opt.zero_grad()
        _train_step(opt, model, [_batch(2)], step=False)
        try:
            opt.zero_grad()
            raise RuntimeError("zero_grad did not raise")
        except AssertionError as e:
            assert "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() " \
                   "or optimizer.synchronize()" in str(e), e
        opt.step()  # the in-flight allreduces still complete
        opt.zero_grad()
        done.append("zero_grad_assertion")

    # 4. synchronize() then step() outside skip_synchronize warns; inside it does not
    opt.zero_grad()
    _train_step(opt, model, [_batch(3)], step=False)
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
        assert not [x for x in w if "skip_synchronize" in str(x.message)]
        opt.zero_grad()
        _train_step(opt, model, [_batch(4)], step=False)
        opt.synchronize()
        opt.step()
        assert [x for x in w if "skip_synchronize" in str(x.message)], [str(x.message) for x in w]
    opt.zero_grad()
    done.append("skip_synchronize")


def _backward_passes_per_step(done):
    # 5. backward_passes_per_step: gradients accumulate locally, one allreduce
    model = _make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=2)
    want = _reference(model, [_batch(5), _batch(6)])
    _train_step(opt, model, [_batch(5), _batch(6)], step=False)
    opt.synchronize()
    _close([p.grad for p in model.parameters()], want)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    if hvd.size() > 1:
        _train_step(opt, model, [_batch(7)], step=False)
        try:  # the accumulating gradients are "in flight" too
            opt.zero_grad()
            raise RuntimeError("zero_grad did not raise")
        except AssertionError:
            pass
        _train_step(opt, model, [_batch(8)], step=False)
        try:
            _train_step(opt, model, [_batch(9)], step=False)
            raise RuntimeError("a third backward pass did not raise")
        except AssertionError as e:
            assert "more than backward_passes_per_step" in str(e), e
        opt.synchronize()
        opt.zero_grad()
    opt.set_backward_passes_per_step(1)
    want = _reference(model, [_batch(10)])
    _train_step(opt, model, [_batch(10)], step=False)
    opt.synchronize()
    _close([p.grad for p in model.parameters()], want)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    done.append("backward_passes_per_step")


def _check_reduced_gradients(tol=1e-6, op=hvd.Average, **kwargs):
    model = _make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=op, **kwargs)
    want = _reference(model, [_batch(11)], op=op)
    for _ in range(2):  # twice: state is reset correctly after a step
        _train_step(opt, model, [_batch(11)], step=False)
        opt.synchronize()
        _close([p.grad for p in model.parameters()], want, tol)
        opt.zero_grad()


def _groups_predivide_sum_and_compression(done):
    # 6. groups (int and explicit lists), predivide, Sum, compression
    _check_reduced_gradients(groups=2)
    _check_reduced_gradients(groups=1)
    m0 = _make()
    _check_reduced_gradients(groups=[[list(m0.parameters())[0]]])  # a parameter of another model: ignored
    _check_reduced_gradients(num_groups=3)
    done.append("groups")
    model = _make()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=model.named_parameters(),
                                   groups=[[params[0], params[3]], [params[1]]])
    want = _reference(model, [_batch(12)])
    _train_step(opt, model, [_batch(12)], step=False)
    opt.synchronize()
    _close([p.grad for p in model.parameters()], want)
    for bad in (0, [[params[0], params[0]]], [["x"]]):
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), groups=bad)
            raise RuntimeError("groups=%r accepted" % (bad,))
        except ValueError:
            pass
    done.append("explicit_groups")
    _check_reduced_gradients(gradient_predivide_factor=2.0)
    _check_reduced_gradients(op=hvd.Sum)
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), op=hvd.Sum, gradient_predivide_factor=2.0)
        raise RuntimeError("predivide with Sum accepted")
    except ValueError:
        pass
    done.append("predivide_sum")
    _check_reduced_gradients(tol=2e-3, compression=hvd.Compression.fp16)
    _check_reduced_gradients(tol=2e-2, compression=hvd.Compression.bf16)
    _check_reduced_gradients(tol=2e-3, compression=hvd.Compression.fp16, groups=2, gradient_predivide_factor=4.0)
    done.append("compression")


class _Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = torch.nn.Linear(4, 2)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x, use_b):
        return self.a(x) + (self.b(x) if use_b else 0)


def _unused_parameter(done):
    # 7. a parameter unused on some ranks still gets the average (zeros elsewhere)
    rank = hvd.rank()
    model = _Branchy()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())  # names for the allreduces
    x, y = _batch(13)
    F.mse_loss(model(x, rank == 0), y).backward()
    opt.synchronize()
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        p.grad = None
    F.mse_loss(ref(x, rank == 0), y).backward()
    want = [hvd.allreduce(p.grad if p.grad is not None else torch.zeros_like(p), name="ref.b%d" % i)
            for i, p in enumerate(ref.parameters())]
    _close([p.grad for p in model.parameters()], want)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    done.append("unused_parameter")


def _last_allreduce_completes_before_its_rank_waits(done):
    # 7b. the step's last allreduce, which its rank's own wait is meant to
    # run (caller_waits), still goes out while that rank is not waiting:
    # ranks other than 0 hold back their synchronize() until rank 0's has
    # returned, and wait for that outside hvd (a file). One bucket, and
    # every gradient on its own.
    import tempfile

    from horovod.common.testing import wait_for_file

    rank = hvd.rank()
    where = hvd.broadcast_object(tempfile.mkdtemp() if rank == 0 else None, root_rank=0, name="last.dir")
    for per_tensor in (False, True):
        if per_tensor:
            os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = "0"
        model = _make(21)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        os.environ.pop("HOROVOD_GRADIENT_BUCKET_MB", None)
        batches = [_batch(23)]
        want = _reference(model, batches)
        _train_step(opt, model, batches, step=False)
        marker = os.path.join(where, "synchronized.%d" % per_tensor)
        if rank == 0:
            opt.synchronize()
            open(marker, "w").close()
        else:
            assert wait_for_file(marker), "rank 0's synchronize() waited for a rank that was not waiting"
            opt.synchronize()
        _close([p.grad for p in model.parameters()], want)
        with opt.skip_synchronize():
            opt.step()
    hvd.barrier()
    if rank == 0:
        for name in os.listdir(where):
            os.remove(os.path.join(where, name))
        os.rmdir(where)
    done.append("last_allreduce_without_waiter")


def _sparse_gradients(done):
    # 8. sparse gradients: as dense, and through sparse_allreduce_async; either
    # way the averaged gradient stays sparse (SparseAdam refuses dense ones)
    rank = hvd.rank()
    for as_dense in (True, False):
        torch.manual_seed(4)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                       named_parameters=emb.named_parameters(), sparse_as_dense=as_dense)
        idx = torch.tensor([rank % 10, 7, (3 * rank) % 10])
        ref = copy.deepcopy(emb)
        ref(idx).sum().backward()
        want = hvd.allreduce(ref.weight.grad.to_dense(), name="ref.sparse")
        emb(idx).sum().backward()
        opt.synchronize()
        assert emb.weight.grad.is_sparse, "sparse_as_dense=%s left a dense gradient" % as_dense
        _close([emb.weight.grad.to_dense()], [want])
        with opt.skip_synchronize():
            opt.step()
        opt.zero_grad()
    done.append("sparse")


class _Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 3, sparse=True)
        self.fc1 = torch.nn.Linear(3, 4)
        self.fc2 = torch.nn.Linear(4, 2)

    def forward(self, idx):
        return self.fc2(torch.relu(self.fc1(self.emb(idx))))


def _gradient_buckets(done):
    # 8b. gradient buckets (the default without groups): a sparse gradient leaves
    # its bucket, dense ones are reduced in buckets, and the result equals
    # per-tensor reduction (HOROVOD_GRADIENT_BUCKET_MB=0, Horovod's behaviour)
    rank, size = hvd.rank(), hvd.size()
    results = []
    for bucket_mb in (None, "0"):
        if bucket_mb is not None:
            os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = bucket_mb
        torch.manual_seed(5)
        mixed = _Mixed()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(mixed.parameters(), lr=0.1),
                                       named_parameters=mixed.named_parameters())
        os.environ.pop("HOROVOD_GRADIENT_BUCKET_MB", None)
        for it in range(2):
            idx = torch.tensor([rank % 10, (it + 3 * rank) % 10])
            mixed(idx).sum().backward()
            opt.step()
            opt.zero_grad()
        buckets = sorted(len(g) for g in {s.group for s in opt._states.values() if s.group is not None})
        results.append((buckets, [p.detach().clone() for p in mixed.parameters()]))
    # fc1/fc2 share a bucket; the embedding left it (one rank: no hooks, no buckets)
    assert results[0][0] == ([4] if size > 1 else []), results[0][0]
    assert results[1][0] == [], results[1][0]
    _close(results[0][1], results[1][1])
    os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = "lots"
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(mixed.parameters(), lr=0.1))
        raise RuntimeError("bad HOROVOD_GRADIENT_BUCKET_MB accepted")
    except ValueError as e:
        assert "HOROVOD_GRADIENT_BUCKET_MB" in str(e)
    os.environ.pop("HOROVOD_GRADIENT_BUCKET_MB")
    done.append("buckets")


def _bucket_bookkeeping_scales_with_parameters(done):
    # 8c. the hooks and synchronize() find a parameter's bucket without hashing
    # the bucket's members: a tuple key hashed every member on every lookup,
    # O(parameters^2) Tensor.__hash__ calls a step (10 ms a step at 100 tensors)
    if hvd.size() == 1:  # no hooks
        done.append("bucket_bookkeeping")
        return
    torch.manual_seed(6)
    model = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(30)])
    n = len(list(model.parameters()))
    x = torch.randn(2, 3)
    for op in (hvd.Average, hvd.Adasum):
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters(), op=op)
        _train_step(opt, model, [(x, torch.zeros(2, 3))])  # the first step may set things up
        opt.zero_grad()
        calls = [0]
        plain_hash = torch.Tensor.__hash__

        def counting_hash(t):
            calls[0] += 1
            return plain_hash(t)

        torch.Tensor.__hash__ = counting_hash
        try:
            _train_step(opt, model, [(x, torch.zeros(2, 3))])
        finally:
            torch.Tensor.__hash__ = plain_hash
        opt.zero_grad()
        for h in opt._hook_handles:
            h.remove()
        # one bucket of n: not n per lookup. Average's hooks and synchronize()
        # reach a parameter's state without hashing it (a handful a step, where
        # they made nine per parameter); Adasum's make about ten per parameter
        # (the wrapped optimizer's state among them).
        limit = 5 if op == hvd.Average else 20 * n
        assert 0 < calls[0] <= limit, (op, calls[0], n)
    done.append("bucket_bookkeeping")


def _bucket_argument_block_reused(done):
    # 8d. a bucket's allreduce is described once: later steps only write the
    # gradients' addresses into its argument block, whether zero_grad() made
    # new gradients or kept them; every step still matches the reference,
    # and a step without gradients (zeros, through the general path) too
    if hvd.size() == 1:  # no hooks
        done.append("bucket_block")
        return
    from horovod.torch import _engine_bridge as bridge
    model = _make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    described = [0]
    plain_describe = bridge._describe

    def counting_describe(tensor):
        described[0] += 1
        return plain_describe(tensor)

    for step, set_to_none in enumerate((True, True, False, False)):
        want = _reference(model, [_batch(40 + step)])
        bridge._describe = counting_describe
        described[0] = 0
        try:
            _train_step(opt, model, [_batch(40 + step)], step=False)
            opt.synchronize()
        finally:
            bridge._describe = plain_describe
        _close([p.grad for p in model.parameters()], want)
        if step > 0:
            assert described[0] == 0, (step, described[0])
        with opt.skip_synchronize():
            opt.step()
        opt.zero_grad(set_to_none=set_to_none)
    opt.zero_grad(set_to_none=True)
    opt.synchronize()
    _close([p.grad for p in model.parameters()], [torch.zeros_like(p) for p in model.parameters()])
    opt.zero_grad()
    done.append("bucket_block")


def _named_parameters_validation(done):
    # 9. named_parameters validation
    model = _make()
    named = list(model.named_parameters())
    for bad in ([(named[0][0], named[0][1]), (named[0][0], named[1][1])], named[:1]):
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=bad)
            raise RuntimeError("bad named_parameters accepted")
        except ValueError:
            pass
    done.append("validation")


# 9b. op=Adasum: every rank's optimizer steps locally (keeping its own
# momentum), the parameter changes are combined with Adasum. Reference: all
# ranks simulated here, one model copy and optimizer each, and the pairwise
# tree (0,1) (2,3) ... then up, per tensor.
def _adasum_pair(a, b):
    aa, bb, ab = (a * a).sum().item(), (b * b).sum().item(), (a * b).sum().item()
    return (1 - ab / (2 * aa) if aa else 1.0) * a + (1 - ab / (2 * bb) if bb else 1.0) * b


def _adasum_tree(vs):
    vs, stride = list(vs), 1
    while stride < len(vs):
        for left in range(0, len(vs) - stride, 2 * stride):
            vs[left] = _adasum_pair(vs[left], vs[left + stride])
        stride *= 2
    return vs[0]


def _adasum_run(bucket_mb):
    # bucket_mb "0": one reduction per parameter; default: one bucket for all four
    size = hvd.size()
    os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = bucket_mb
    model = _make().double()
    sims = [copy.deepcopy(model) for _ in range(size)]
    sim_opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in sims]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    os.environ.pop("HOROVOD_GRADIENT_BUCKET_MB")
    assert isinstance(opt, torch.optim.SGD)
    for s in range(3):
        shared = [p.detach().clone() for p in model.parameters()]
        deltas = []
        for r, (m, o) in enumerate(zip(sims, sim_opts)):
            with torch.no_grad():
                for p, v in zip(m.parameters(), shared):
                    p.copy_(v)
            o.zero_grad()
            x, y = _batch(40 + s, r)
            F.mse_loss(m(x.double()), y.double()).backward()
            o.step()
            deltas.append([p.detach() - v for p, v in zip(m.parameters(), shared)])
        want = [v + _adasum_tree([d[i] for d in deltas]) for i, v in enumerate(shared)]
        opt.zero_grad()
        x, y = _batch(40 + s)
        F.mse_loss(model(x.double()), y.double()).backward()
        opt.step()
        _close([p.detach() for p in model.parameters()], want, 1e-9)
    if size > 1:  # one rank has nothing to combine: the plain wrapper is used, as in Horovod
        assert sorted(len(b) for b in opt._buckets) == ([1, 1, 1, 1] if bucket_mb == "0" else [4])
        try:
            with opt.skip_synchronize():
                pass
            raise RuntimeError("skip_synchronize accepted with Adasum")
        except AssertionError as e:
            assert "Adasum" in str(e)
        F.mse_loss(model(_batch(50)[0].double()), _batch(50)[1].double()).backward()
        try:
            opt.zero_grad()
            raise RuntimeError("zero_grad accepted with changes in flight")
        except AssertionError:
            pass
        opt.step()
    return model


def _adasum(done):
    _adasum_run("0")
    _adasum_run("2")
    done.append("adasum")


def _adam_keeps_replicas_identical(done):
    # 10. Adam through the wrapper keeps the replicas identical
    model = _make()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())  # names for the allreduces
    for s in range(3):
        opt.zero_grad()
        _train_step(opt, model, [_batch(20 + s)])
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(gathered[0], g) for g in gathered), "replicas diverged"
    done.append("adam_identical")


def _channels_last_gradients(done):
    # 11. channels_last (non-contiguous) gradients are reduced and written back in place
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(conv.parameters(), lr=0.1),
                                   named_parameters=conv.named_parameters())
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(hvd.rank())).to(
        memory_format=torch.channels_last)
    ref = copy.deepcopy(conv)
    ref(x).square().sum().backward()
    want = [hvd.allreduce(p.grad.contiguous(), name="ref.cl%d" % i) for i, p in enumerate(ref.parameters())]
    conv(x).square().sum().backward()
    grad_before = conv.weight.grad
    opt.synchronize()
    assert conv.weight.grad is grad_before
    _close([p.grad.contiguous() for p in conv.parameters()], want, 1e-5)
    done.append("channels_last")


def _process_set(done):
    # 12. a process set: gradients are averaged over its ranks only
    if hvd.size() != 3:
        return
    rank = hvd.rank()
    ps = hvd.add_process_set([0, 2])
    model = _make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=ps)
    local = _local_grads(model, [_batch(30)])
    _train_step(opt, model, [_batch(30)], step=False)
    opt.synchronize()
    if rank in (0, 2):
        want = [hvd.allreduce(g, name="ref.ps%d" % i, process_set=ps) for i, g in enumerate(local)]
    else:
        want = local
    _close([p.grad for p in model.parameters()], want)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    hvd.remove_process_set(ps)
    done.append("process_set")


def every_optimizer_check():
    """Runs every check in order (an assertion fails the rank); returns the names of those that passed."""
    warnings.filterwarnings("ignore", "Sparse invariant checks")
    hvd.init()
    done = []
    _wrapper_class_averages_and_steps(done)
    _param_groups_zero_grad_and_skip_synchronize(done)
    _backward_passes_per_step(done)
    _groups_predivide_sum_and_compression(done)
    _unused_parameter(done)
    if hvd.size() > 1:
        _last_allreduce_completes_before_its_rank_waits(done)
    _sparse_gradients(done)
    _gradient_buckets(done)
    _bucket_bookkeeping_scales_with_parameters(done)
    _bucket_argument_block_reused(done)
    _named_parameters_validation(done)
    _adasum(done)
    _adam_keeps_replicas_identical(done)
    _channels_last_gradients(done)
    _process_set(done)
    return done


def autotuned_buckets(steps, layers, bucket_mb=None):
    """Trains `layers` 256x256 layers (257 KiB of gradients each) under
    HOROVOD_AUTOTUNE with HOROVOD_GRADIENT_BUCKET_MB unset (None) or set to
    `bucket_mb`, then the same steps again with every gradient reduced on its
    own (not tuned). Returns the bucket size and the number of grouped
    allreduces of every step, whether the optimizer tunes its buckets and
    still asks the tuner at the end, and the parameter bytes of both runs.
    """
    hvd.init()
    runs, buckets = [], []
    for per_tensor in (False, True):
        if per_tensor:
            os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = "0"
        elif bucket_mb is not None:
            os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = bucket_mb
        torch.manual_seed(9)
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(layers)])
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters())
        os.environ.pop("HOROVOD_GRADIENT_BUCKET_MB", None)
        for step in range(steps):
            g = torch.Generator().manual_seed(100 * step + hvd.rank())
            model(torch.randn(8, 256, generator=g)).pow(2).mean().backward()
            if not per_tensor:
                buckets.append([opt._bucket_bytes, len({s.group for s in opt._states.values() if s.group is not None})])
            opt.step()
            opt.zero_grad()
        runs.append(b"".join(p.detach().numpy().tobytes() for p in model.parameters()).hex())
        if not per_tensor:
            tuning = opt._bucket_tuning
    return {"buckets": buckets, "tuning": tuning is not None, "still_asking": tuning is not None and tuning._asking,
            "tuned": runs[0], "per_tensor": runs[1]}


def autotuned_buckets_with_join(early, steps):
    """Under HOROVOD_AUTOTUNE, rank `early` runs out of data after a few steps
    and calls hvd.join() while the others train on: the bucket size they
    keep asking for must not need the joined rank. Returns the steps this
    rank trained and whether it still asks the tuner at the end."""
    hvd.init()
    torch.manual_seed(9)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    mine = 5 if hvd.rank() == early else steps
    for step in range(mine):
        g = torch.Generator().manual_seed(100 * step + hvd.rank())
        model(torch.randn(8, 256, generator=g)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    hvd.join()
    return {"steps": mine, "still_asking": opt._bucket_tuning._asking}
