# sync_batch_norm.py - rank side of test_sync_batch_norm.py: each rank holds
# its own slice (of a different size) of one batch and compares
# hvd.SyncBatchNorm on it with torch's BatchNorm on the whole batch.
"""Rank programs for test_sync_batch_norm.py."""

import torch

import horovod.torch as hvd

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)

# (shape, momentum, affine, dtype) of each training-mode case.
TRAINING_CASES = [((4, 7), 0.1, True, torch.float64),
                  ((3, 5, 6), None, True, torch.float64),
                  ((2, 3, 4, 5), 0.3, False, torch.float64),
                  ((3, 4, 5), 0.1, True, torch.float32)]


def _compare_training_case(shape, momentum, affine, dtype, mine, counts):
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    g = torch.Generator().manual_seed(7)
    full_shape = (sum(counts),) + shape[1:]
    x_full = (torch.randn(full_shape, generator=g, dtype=dtype) * 3 + 1)
    w_out = torch.randn(full_shape, generator=g, dtype=dtype)
    C = shape[1]
    ref = torch.nn.BatchNorm1d(C, momentum=momentum, affine=affine).to(dtype) if len(shape) < 4 else \
        torch.nn.BatchNorm2d(C, momentum=momentum, affine=affine).to(dtype)
    bn = hvd.SyncBatchNorm(C, momentum=momentum, affine=affine).to(dtype)
    if affine:
        with torch.no_grad():
            ref.weight.copy_(torch.randn(C, generator=g, dtype=dtype))
            ref.bias.copy_(torch.randn(C, generator=g, dtype=dtype))
            bn.weight.copy_(ref.weight)
            bn.bias.copy_(ref.bias)
    for it in range(2):  # twice: running statistics accumulate the same way
        xr = x_full.clone().requires_grad_(True)
        out_ref = ref(xr)
        (out_ref * w_out).sum().backward()
        x = x_full[mine].clone().requires_grad_(True)
        out = bn(x)
        (out * w_out[mine]).sum().backward()
        assert torch.allclose(out, out_ref[mine], atol=tol, rtol=tol), (shape, "forward")
        assert torch.allclose(x.grad, xr.grad[mine], atol=tol, rtol=tol), (shape, "input grad")
        if affine:
            for p, q in ((bn.weight, ref.weight), (bn.bias, ref.bias)):
                total = hvd.allreduce(p.grad, op=hvd.Sum, name="check.wgrad")
                assert torch.allclose(total, q.grad, atol=tol, rtol=tol), (shape, "weight grad")
                p.grad = None
                q.grad = None
        assert torch.allclose(bn.running_mean, ref.running_mean, atol=tol, rtol=tol), (shape, "running_mean")
        assert torch.allclose(bn.running_var, ref.running_var, atol=tol, rtol=tol), (shape, "running_var")
        assert int(bn.num_batches_tracked) == int(ref.num_batches_tracked)
    bn.eval()
    ref.eval()  # eval: local normalisation with the running statistics
    assert torch.allclose(bn(x_full[mine]), ref(x_full)[mine], atol=tol, rtol=tol)


def sync_batch_norm_matches_batch_norm():
    """Compares every case (an assertion fails the rank); returns {"cases": how many were compared}."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    counts = [r + 2 for r in range(size)]
    start = sum(counts[:rank])
    mine = slice(start, start + counts[rank])
    cases = 0
    for shape, momentum, affine, dtype in TRAINING_CASES:
        _compare_training_case(shape, momentum, affine, dtype, mine, counts)
        cases += 1

    # no running statistics: batch statistics in eval mode too, still synchronised
    g = torch.Generator().manual_seed(8)
    x_full = torch.randn(sum(counts), 3, dtype=torch.float64, generator=g)
    bn = hvd.SyncBatchNorm(3, track_running_stats=False).double().eval()
    ref = torch.nn.BatchNorm1d(3, track_running_stats=False).double().eval()
    assert torch.allclose(bn(x_full[mine]), ref(x_full)[mine], atol=1e-10)
    try:
        bn(torch.zeros(3))
        raise RuntimeError("1-D input accepted")
    except ValueError:
        pass
    return {"cases": cases + 1}
