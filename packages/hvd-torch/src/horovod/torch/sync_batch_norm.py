# sync_batch_norm.py - batch normalization whose batch statistics cover the
# samples of every rank, not just the local mini-batch. Horovod's version
# runs only on GPUs (it calls PyTorch's CUDA-only batch_norm_* kernels); this
# one is written with ordinary tensor ops, so it runs wherever the tensors
# live, and needs one collective each way:
#   forward:  allgather of (count, mean, biased var) per rank, combined with
#             the parallel-variance formula (ranks may have different batch
#             sizes, and summing raw squares would lose precision);
#   backward: one Sum allreduce of (sum dy, sum dy*(x-mean)).
# Weight and bias gradients stay local: DistributedOptimizer averages them
# like any other gradient, as in Horovod.
"""Synchronous batch normalization across Horovod ranks."""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from horovod.common.process_sets import global_process_set
from horovod.torch.mpi_ops import Sum, allgather_async, allreduce_async, synchronize

__all__ = ["SyncBatchNorm"]


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over inputs of shape `(N, C, ...)` whose batch statistics are computed
    over the samples of every rank in the process set rather than the local mini-batch alone.

    In training mode the per-channel mean and variance are combined across the ranks during the
    forward pass, which matters most when each device only holds a handful of samples.

    Apart from that it behaves like PyTorch's BatchNorm layers (see
    https://pytorch.org/docs/stable/nn.html#batchnorm2d).

    Arguments:
        num_features: the number of channels `C` in an input of shape `(N, C, ...)`.
        eps: added to the variance in the denominator to keep the division stable. Default: 1e-5.
        momentum: weight of the newest batch when updating running_mean and running_var;
            `None` gives a cumulative (plain) average over all batches seen. Default: 0.1.
        affine: whether the layer has a learnable per-channel scale and shift. Default: `True`.
        track_running_stats: whether running estimates of the mean and variance are kept; when
            `False`, batch statistics are used in eval mode too. Default: `True`.
        process_set: the ProcessSet whose ranks share their statistics; the global process set
            (all ranks) unless given.

    .. note:: Unlike Horovod's, CPU tensors are supported in training mode.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _average_factor(self):
        # Same rule as torch's _BatchNorm: momentum=None means a cumulative
        # moving average over the batches seen so far.
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self._average_factor() if self.training and self.track_running_stats else 0.0,
                            self.eps)

    def _maybe_run_sync_bn(self, input):
        if self.process_set.size() == 1:
            return self._run_bn(input)
        update = self.training and self.track_running_stats
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if update else None,
                                    self.running_var if update else None,
                                    self.eps, self._average_factor() if update else 0.0, self.process_set)

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        return self._maybe_run_sync_bn(input)


def _channel_view(t, ndim):
    # (C,) -> (1, C, 1, ...) so per-channel values broadcast over (N, C, ...).
    return t.reshape([1, -1] + [1] * (ndim - 2))


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        input = input.contiguous()
        # Statistics in at least float32: fp16/bf16 sums over a large batch
        # lose too many digits.
        stat_dtype = torch.promote_types(input.dtype, torch.float32)
        x = input.to(stat_dtype)
        dims = [0] + list(range(2, input.dim()))
        count = input.numel() // input.size(1)
        if count > 0:
            var, mean = torch.var_mean(x, dim=dims, unbiased=False)
        else:  # an empty local batch contributes nothing, but must still take part
            mean = torch.zeros(input.size(1), dtype=stat_dtype, device=input.device)
            var = torch.zeros_like(mean)
        local = torch.cat([torch.tensor([float(count)], dtype=stat_dtype, device=input.device), mean, var])
        gathered = synchronize(allgather_async(local.unsqueeze(0).cpu(), name="sync_batch_norm.stats",
                                               process_set=process_set)).to(input.device)
        counts, means, variances = gathered[:, :1], gathered[:, 1:1 + mean.numel()], gathered[:, 1 + mean.numel():]
        total = counts.sum()
        if total.item() <= 1 and running_var is not None:
            raise ValueError("Expected more than 1 value per channel when training, "
                             "got input size {}".format(list(input.size())))
        mean_all = (counts * means).sum(0) / total
        var_all = (counts * (variances + (means - mean_all) ** 2)).sum(0) / total
        invstd = torch.rsqrt(var_all + eps)

        if running_mean is not None:
            with torch.no_grad():
                unbiased = var_all * (total / (total - 1))
                running_mean.mul_(1 - momentum).add_(mean_all.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)

        xhat = (x - _channel_view(mean_all, input.dim())) * _channel_view(invstd, input.dim())
        out = xhat
        if weight is not None:
            out = out * _channel_view(weight.to(stat_dtype), input.dim())
        if bias is not None:
            out = out + _channel_view(bias.to(stat_dtype), input.dim())
        ctx.save_for_backward(xhat, weight, invstd, total)
        ctx.process_set = process_set
        ctx.has_bias = bias is not None
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        xhat, weight, invstd, total = ctx.saved_tensors
        ndim = xhat.dim()
        dims = [0] + list(range(2, ndim))
        dy = grad_output.contiguous().to(xhat.dtype)
        sum_dy = dy.sum(dims)
        # sum dy * (x - mean) = sum dy * xhat / invstd
        sum_dy_xhat = (dy * xhat).sum(dims)

        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # The input gradient depends on these sums over the whole global
            # batch, because every sample moved the shared mean and variance.
            stats = torch.cat([sum_dy, sum_dy_xhat]).cpu()
            stats = synchronize(allreduce_async(stats, op=Sum, name="sync_batch_norm.sum_dy",
                                                process_set=ctx.process_set)).to(xhat.device)
            c = sum_dy.numel()
            mean_dy = stats[:c] / total
            mean_dy_xhat = stats[c:] / total
            scale = invstd if weight is None else invstd * weight.to(xhat.dtype)
            grad_input = (dy - _channel_view(mean_dy, ndim) - xhat * _channel_view(mean_dy_xhat, ndim)) \
                * _channel_view(scale, ndim)
            grad_input = grad_input.to(grad_output.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(weight.dtype if weight is not None else grad_output.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
