# optimizer.py - data-parallel training: DistributedOptimizer (the Module
# API: it wraps an mx.optimizer.Optimizer and averages each gradient before
# the update) and DistributedTrainer (Gluon: a gluon.Trainer whose gradient
# exchange is hvd's allreduce instead of a kvstore). The allreduces are
# pushed on MXNet's engine, so the updates that read the gradients wait
# for them and the backward pass of later layers overlaps the exchange.
"""DistributedOptimizer and DistributedTrainer."""

import warnings
from collections import OrderedDict, defaultdict

import mxnet as mx

from horovod.common.basics import Average
from horovod.common.optimizer_options import check_optimizer_options, gradient_scale_factors
from horovod.common.process_sets import global_process_set
from horovod.common.util import split_list
from horovod.mxnet.compression import Compression
from horovod.mxnet.mpi_ops import allreduce_, grouped_allreduce_


def _reduce_gradients(grads, names, num_groups, prescale_factor, postscale_factor, process_set):
    """Averages the gradients in place: one allreduce each, or `num_groups` grouped ones (split by dtype)."""
    if num_groups > 0:
        for i, (group, group_names) in enumerate(zip(split_list(grads, num_groups),
                                                     split_list(names, num_groups))):
            by_dtype = defaultdict(list)
            for grad, name in zip(group, group_names):
                by_dtype[grad.dtype].append((grad, name))
            for entries in by_dtype.values():
                tensors = [g for g, _ in entries]
                grouped_allreduce_(tensors, name="%s:%s" % (entries[0][1], entries[-1][1]), priority=-i,
                                   prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                   process_set=process_set, op=Average)
        return
    for i, (grad, name) in enumerate(zip(grads, names)):
        allreduce_(grad, name=name, priority=-i, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                   process_set=process_set, op=Average)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an MXNet optimizer so that each update first averages its gradient over the ranks.

    For the Module API (``mod.init_optimizer(optimizer=hvd.DistributedOptimizer(opt))``);
    Gluon code uses DistributedTrainer instead.

    Args:
        optimizer: the mx.optimizer.Optimizer that applies the averaged gradients.
        gradient_predivide_factor: gradients are multiplied by 1/f before the
            sum and by f/size after it, instead of 1/size after it.
        num_groups: reduce the gradients of one update in this many grouped
            allreduces (0: one allreduce per gradient).
        process_set: the ranks that average their gradients (default: all).
    """

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0, process_set=global_process_set):
        # No super().__init__: every attribute not set here is the wrapped optimizer's (__getattr__).
        check_optimizer_options(Average, gradient_predivide_factor)
        if num_groups < 0:
            raise ValueError("num_groups must be >= 0, got %r" % (num_groups,))
        self._optimizer = optimizer
        self._gradient_predivide_factor = gradient_predivide_factor
        self._scale_factors = gradient_scale_factors(Average, gradient_predivide_factor)
        self._num_groups = num_groups
        self._process_set = process_set

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _do_allreduce(self, index, grad):
        if self._process_set.size() == 1:
            return
        if isinstance(index, (tuple, list)):
            grads, names = list(grad), [str(i) for i in index]
        else:
            grads, names = [grad], [str(index)]
        _reduce_gradients(grads, names, self._num_groups, *self._scale_factors, self._process_set)

    def update(self, index, weight, grad, state):
        if self._process_set.included():
            self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        if self._process_set.included():
            self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A gluon.Trainer that averages gradients over the ranks with hvd's allreduce (no kvstore).

    Args:
        params: the parameters to train (a ParameterDict, dict or list).
        optimizer: the optimizer (name or mx.optimizer.Optimizer; a
            DistributedOptimizer is unwrapped, with a warning).
        optimizer_params: the optimizer's arguments when `optimizer` is a name.
        compression: Compression.none (default) or Compression.fp16 for the exchange.
        gradient_predivide_factor: as DistributedOptimizer's.
        prefix: prepended to the gradients' tensor names; give each trainer of
            a program its own.
        num_groups: as DistributedOptimizer's.
        process_set: the ranks that average their gradients (default: all).
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0, process_set=global_process_set):
        check_optimizer_options(Average, gradient_predivide_factor)
        if num_groups < 0:
            raise ValueError("num_groups must be >= 0, got %r" % (num_groups,))
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("prefix must be a str or None, got %s" % type(prefix).__name__)
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer averages the gradients itself and was given a DistributedOptimizer: "
                          "it uses the optimizer that one wraps. Pass the plain optimizer to silence this.")
        if isinstance(params, dict):
            params = OrderedDict(params)
        elif isinstance(params, (list, tuple)):
            params = sorted(params)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._compression = compression
        self._process_set = process_set
        self._gradient_predivide_factor = gradient_predivide_factor
        self._scale_factors = gradient_scale_factors(Average, gradient_predivide_factor)
        self._prefix = prefix or ""
        self._num_groups = num_groups

    def _allreduce_grads(self):
        if self._process_set.size() == 1 or not self._process_set.included():
            return
        grads, names, contexts, originals = [], [], [], []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            original = param.list_grad()[0]
            compressed, ctx = self._compression.compress(original)
            grads.append(compressed)
            names.append(self._prefix + str(i))
            contexts.append(ctx)
            originals.append(original)
        _reduce_gradients(grads, names, self._num_groups, *self._scale_factors, self._process_set)
        for compressed, ctx, original in zip(grads, contexts, originals):
            if compressed is not original:
                original[:] = self._compression.decompress(compressed, ctx)
