# horovod/tensorflow/__init__.py - the public `import horovod.tensorflow as hvd`
# API: hvd-core's basics and process sets and the collective ops (both from
# mpi_ops, the only module that touches the op library), the framework-level
# collectives (allreduce with compression, averaging and tf.IndexedSlices,
# grouped and reduce-scatter variants), and the training helpers
# (DistributedGradientTape, DistributedOptimizer for tf.compat.v1
# optimizers, variable/object broadcasts, SyncBatchNormalization, TF1 hooks).
"""Horovod's TensorFlow API, as `import horovod.tensorflow as hvd`."""

import os
import warnings

import tensorflow as tf

from horovod.common.util import get_average_backwards_compatibility_fun, num_rank_is_power_2, split_list
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum, _allreduce, _grouped_allreduce,
    _grouped_reducescatter, _normalize_name, _reducescatter, add_process_set, allgather, alltoall, barrier,
    broadcast, broadcast_, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built,
    gloo_enabled, grouped_allgather, init, is_homogeneous, is_initialized, join, local_rank, local_rank_op,
    local_size, local_size_op, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, process_set_included_op,
    rank, rank_op, remove_process_set, rocm_built, shutdown, size, size_op, start_timeline, stop_timeline)
from horovod.tensorflow.functions import (allgather_object, broadcast_object, broadcast_object_fn,  # noqa: F401
                                          broadcast_variables)
from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper, reduce_except_local
from horovod.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from horovod.tensorflow.util import (_as_tf_variable, _cache, _executing_eagerly, _make_subgraph,  # noqa: F401
                                     _var_ref, refs_to_vars, vars_to_refs)

try:
    from horovod.tensorflow.mpi_ops import xla_built  # noqa: F401
except ImportError:  # pragma: no cover - older op layer
    pass


class _ReduceOps:
    Average, Sum = Average, Sum


handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_ReduceOps)
check_num_rank_power_of_2 = num_rank_is_power_2


def __getattr__(name):
    # `hvd.elastic` and `hvd.keras` work after a plain `import horovod.tensorflow`
    # without importing them (and Keras) up front.
    if name in ("elastic", "keras"):
        import importlib
        return importlib.import_module("horovod.tensorflow." + name)
    raise AttributeError("module 'horovod.tensorflow' has no attribute %r" % name)


def _elastic():
    return bool(int(os.environ.get("HOROVOD_ELASTIC", 0)))


def _set_size(process_set, dtype):
    """The process set's size as a `dtype` tensor; read when the graph runs under elastic
    training (the size changes between resets), else fixed when the graph is built."""
    if _elastic():
        return tf.cast(size_op(process_set_id=process_set.process_set_id), dtype)
    return tf.cast(process_set.size(), dtype)


def _check_sparse_op(op, prescale_factor, postscale_factor):
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction does not currently support sparse tensors. As a "
                                  "workaround please pass sparse_as_dense=True to DistributedOptimizer")
    if op != Sum and op != Average:
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _split_by_dtype(tensors):
    """Indices of `tensors` per dtype, in first-seen order: the grouped ops take one dtype each."""
    groups = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype.base_dtype, []).append(i)
    return list(groups.values())


def _group_name(name, k, count):
    if name is None or count == 1:
        return name
    return "%s_%d" % (name, k)


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces a tf.Tensor or tf.IndexedSlices across all ranks.

    Dense tensors go through the engine's allreduce. A tf.IndexedSlices is handled by allgathering
    its values and its indices instead, which amounts to reducing the dense tensor it stands for
    (rows with the same index add up once densified).

    Arguments:
        tensor: the tf.Tensor, tf.Variable or tf.IndexedSlices to reduce. Dense inputs must
            have the same shape on every rank.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        device_dense: device on which dense tensors are processed.
        device_sparse: device on which tf.IndexedSlices are processed.
        compression: a compressor (see `horovod.tensorflow.Compression`) applied before sending and
            undone on the result, to shrink the traffic of each worker. Compression.none by
            default.
        op: how the ranks' tensors are combined: Sum, Average, Min, Max or Product (Adasum is
            also accepted for dense tensors; tf.IndexedSlices take Sum or Average only).
            None means Average.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        name: optional name of the operation, used to match it across ranks.
        ignore_name_scope: when True, the enclosing TensorFlow name scope is left out of the
            name the operation gets.

    Returns:
        A tensor (or tf.IndexedSlices) with the shape and dtype of `tensor`, holding the
        reduction over the ranks (an average unless `op` says otherwise).
    """
    op = handle_average_backwards_compatibility(op, average)

    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_op(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            # A sparse tensor is reduced by gathering every rank's slices:
            # rows with the same index add up when the result is densified.
            values = allgather(tensor.values, name=None if name is None else name + "_values",
                               process_set=process_set, ignore_name_scope=ignore_name_scope)
            indices = allgather(tensor.indices, name=None if name is None else name + "_indices",
                                process_set=process_set, ignore_name_scope=ignore_name_scope)
            if op == Average:
                values = values / _set_size(process_set, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)

    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        # Average goes to the engine as such: it divides after summing (and
        # applies the pre/postscale factors), in the wire dtype.
        reduced = _allreduce(compressed, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, name=name, process_set=process_set,
                             ignore_name_scope=ignore_name_scope)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set,
                      ignore_name_scope=False,
                      name=None):
    """Reduces a sequence of tf.Tensor or tf.IndexedSlices across all ranks, as groups.

    Arguments:
        tensors: the tf.Tensor, tf.Variable or tf.IndexedSlices objects to reduce. The entry
            at a given position must have the same dtype and shape on every rank.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        device_dense: device on which dense tensors are processed.
        device_sparse: device on which tf.IndexedSlices are processed.
        compression: a compressor (see `horovod.tensorflow.Compression`) applied before sending and
            undone on the results, to shrink the traffic of each worker. Compression.none by
            default.
        op: how the ranks' tensors are combined: Sum, Average, Min, Max or Product (Adasum is
            also accepted for dense tensors; tf.IndexedSlices take Sum or Average only).
            None means Average.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        name: optional base name of the grouped operation, used to match it across ranks.
        ignore_name_scope: when True, the enclosing TensorFlow name scope is left out of the
            names the operations get.

    Returns:
        A list with one result per input, in input order, each with that input's shape and
        dtype and holding its reduction over the ranks.

    Tensors of different dtypes may be mixed (unlike Horovod): each dtype
    becomes its own group.
    """
    if not tensors:
        return tensors
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    out = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]

    if sparse:
        _check_sparse_op(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = _grouped_allgather_by_dtype([tensors[i].values for i in sparse], name, "values", process_set,
                                                 ignore_name_scope)
            indices = _grouped_allgather_by_dtype([tensors[i].indices for i in sparse], name, "indices",
                                                  process_set, ignore_name_scope)
            for i, v, idx in zip(sparse, values, indices):
                if op == Average:
                    v = v / _set_size(process_set, v.dtype)
                out[i] = tf.IndexedSlices(v, idx, dense_shape=tensors[i].dense_shape)

    if dense:
        with tf.device(device_dense):
            compressed, ctxs = zip(*[compression.compress(tensors[i]) for i in dense])
            compressed = [tf.convert_to_tensor(c) for c in compressed]
            parts = _split_by_dtype(compressed)
            for k, part in enumerate(parts):
                reduced = _grouped_allreduce([compressed[j] for j in part], op=op, prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor, process_set=process_set,
                                             name=_group_name(name, k, len(parts)),
                                             ignore_name_scope=ignore_name_scope)
                for j, r in zip(part, reduced):
                    out[dense[j]] = compression.decompress(r, ctxs[j])
    return out


def _grouped_allgather_by_dtype(tensors, name, suffix, process_set, ignore_name_scope):
    out = [None] * len(tensors)
    parts = _split_by_dtype(tensors)
    for k, part in enumerate(parts):
        part_name = None if name is None else _group_name("%s_%s" % (name, suffix), k, len(parts))
        gathered = grouped_allgather([tensors[j] for j in part], name=part_name, process_set=process_set,
                                     ignore_name_scope=ignore_name_scope)
        for j, g in zip(part, gathered):
            out[j] = g
    return out


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set,
                  ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatter on a tf.Tensor: the ranks' tensors are reduced and each rank gets back its own
    block of rows of the result.

    Arguments:
        tensor: the tf.Tensor or tf.Variable to reduce; it must have the same shape on every
            rank.
        device_dense: device on which the tensor is processed.
        compression: a compressor (see `horovod.tensorflow.Compression`) applied before sending and
            undone on the result, to shrink the traffic of each worker. Compression.none by
            default.
        op: how the ranks' tensors are combined: Average (the default) or Sum.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        name: optional name of the operation, used to match it across ranks.
        ignore_name_scope: when True, the enclosing TensorFlow name scope is left out of the
            name the operation gets.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced block is multiplied by this afterwards.

    Returns:
        A tensor of `tensor`'s dtype and number of dimensions holding this rank's block of
        the reduction (an average with the default op); only its first dimension differs
        from the input's, being this rank's share of it.
    """
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _reducescatter(compressed, op=op, name=name, process_set=process_set,
                                 ignore_name_scope=ignore_name_scope, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)
        return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatter on a sequence of tf.Tensor, as groups: each entry is reduced with the entries at
    the same position on the other ranks, and each rank gets back its own block of rows of every
    result.

    Arguments:
        tensors: the tf.Tensor or tf.Variable objects to reduce. The entry at a given position
            must have the same shape on every rank.
        device_dense: device on which the tensors are processed.
        compression: a compressor (see `horovod.tensorflow.Compression`) applied before sending and
            undone on the results, to shrink the traffic of each worker. Compression.none by
            default.
        op: how the ranks' tensors are combined: Average (the default) or Sum.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced block is multiplied by this afterwards.

    Returns:
        A list with one tensor per input, of the input's dtype and number of dimensions,
        holding this rank's block of the reduction; only the first dimension differs from
        the input's, being this rank's share of it.
    """
    if not tensors:
        return tensors
    with tf.device(device_dense):
        compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
        compressed = [tf.convert_to_tensor(c) for c in compressed]
        out = [None] * len(compressed)
        for part in _split_by_dtype(compressed):
            reduced = _grouped_reducescatter([compressed[j] for j in part], op=op, process_set=process_set,
                                             prescale_factor=prescale_factor, postscale_factor=postscale_factor)
            for j, r in zip(part, reduced):
                out[j] = compression.decompress(r, ctxs[j])
        return out


def _reduction_enabled(process_set):
    """Whether gradients need communicating: a Python bool, or under elastic training a
    boolean tensor (membership and size can change without rebuilding the graph)."""
    if process_set.process_set_id is None:
        # Skipping the reduction here would silently train unsynchronised replicas.
        raise ValueError("%s is not registered: pass it to hvd.init(process_sets=[...]) or "
                         "hvd.add_process_set() first" % (process_set,))
    if _elastic():
        return tf.logical_and(tf.equal(process_set_included_op(process_set.process_set_id), 1),
                              tf.greater(size_op(process_set.process_set_id), 1))
    return bool(process_set.included()) and process_set.size() > 1


def _allreduce_cond(tensor, *args, process_set=global_process_set, **kwargs):
    enabled = _reduction_enabled(process_set)
    if isinstance(enabled, bool):
        return allreduce(tensor, *args, process_set=process_set, **kwargs) if enabled else tensor
    return tf.cond(enabled, lambda: allreduce(tensor, *args, process_set=process_set, **kwargs), lambda: tensor)


def _grouped_allreduce_cond(tensors, *args, process_set=global_process_set, **kwargs):
    enabled = _reduction_enabled(process_set)
    if isinstance(enabled, bool):
        return grouped_allreduce(tensors, *args, process_set=process_set, **kwargs) if enabled else list(tensors)
    return tf.cond(enabled, lambda: grouped_allreduce(tensors, *args, process_set=process_set, **kwargs),
                   lambda: list(tensors))


# ---------------------------------------------------------------------------
# TF1 (tf.compat.v1 graph mode) helpers

def broadcast_global_variables(root_rank):
    """Copies the value of every global variable from `root_rank` to all other ranks (graph mode only;
    under eager execution it raises RuntimeError).

    **NOTE:** deprecated in TensorFlow 2.0.

    Arguments:
        root_rank: the rank whose variable values are sent to the others.
    """
    if _executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """SessionRunHook that, once the session has been created, copies every global variable from
    `root_rank` to all other ranks.

    This gives all workers the same starting point, whether the weights were initialised
    randomly or restored from a checkpoint.

    **NOTE:** deprecated in TensorFlow 2.0.
    """

    def __init__(self, root_rank, device=''):
        """Creates the hook.

        Args:
          root_rank:
            The rank whose values are sent; every other rank receives them.
          device:
            Device on which the broadcast ops are placed.
        """
        super(BroadcastGlobalVariablesHook, self).__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        # A MonitoredSession may build a fresh graph (e.g. after a restart):
        # the op must belong to the graph being run.
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


# ---------------------------------------------------------------------------
# gradient reduction shared by DistributedGradientTape, DistributedOptimizer
# and the Keras optimizers (horovod._keras)

def _index_groups(grads, vars, groups):
    """Which gradients travel together, as a tuple of index tuples (None: one op per gradient).

    `groups` is a number of groups (consecutive gradients split evenly) or a
    tuple of tuples of variable references; gradients of variables not named
    in any group form a group each, as in Horovod.
    """
    present = [i for i, g in enumerate(grads) if g is not None]
    if groups is None:
        return None
    if isinstance(groups, int):
        parts = split_list(present, min(groups, len(present))) if present else []
        return tuple(tuple(p) for p in parts if p)
    if vars is None:
        raise ValueError("groups given as lists of variables need the variables of the gradients")
    index_of = {_var_ref(v): i for i, v in enumerate(vars) if grads[i] is not None}
    out = []
    for group in groups:
        idx = tuple(index_of.pop(ref) for ref in group if ref in index_of)
        if idx:
            out.append(idx)
    out.extend((i,) for i in sorted(index_of.values()))
    return tuple(out)


@_cache
def _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                    gradient_predivide_factor, groups, process_set):
    if op == Average:
        # The engine divides by the size for Average; the predivide factor
        # moves part of that division before the sum (less overflow in fp16).
        prescale_factor = 1.0 / gradient_predivide_factor
        postscale_factor = gradient_predivide_factor
    else:
        prescale_factor = postscale_factor = 1.0
    dense_options = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression, op=op,
                         prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                         process_set=process_set)
    # Sparse gradients are allgathered, which takes no scale factors; for
    # Average the two factors cancel out anyway (1/f before, f after).
    sparse_options = dict(dense_options, prescale_factor=1.0, postscale_factor=1.0)

    def options_for(grad):
        return sparse_options if isinstance(grad, tf.IndexedSlices) else dense_options

    def reduce(grads, index_groups, use_generic_names):
        with tf.name_scope(name + "_Allreduce"):
            if sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            if index_groups is None:
                return [None if g is None else
                        _allreduce_cond(g, name="grad_%d" % i if use_generic_names else None,
                                        ignore_name_scope=use_generic_names, **options_for(g))
                        for i, g in enumerate(grads)]
            out = [None] * len(grads)
            for k, idx in enumerate(index_groups):
                # Within a group, dense and sparse members travel separately
                # (sparse ones need other scale factors).
                for kind, members in (("", [i for i in idx if not isinstance(grads[i], tf.IndexedSlices)]),
                                      ("_sparse", [i for i in idx if isinstance(grads[i], tf.IndexedSlices)])):
                    if not members:
                        continue
                    reduced = _grouped_allreduce_cond([grads[i] for i in members],
                                                      name="grad_%d%s" % (k, kind) if use_generic_names else None,
                                                      ignore_name_scope=use_generic_names,
                                                      **options_for(grads[members[0]]))
                    for i, r in zip(members, reduced):
                        out[i] = r
            return out

    # Built once per configuration (this function is cached), so eager
    # training steps reuse one traced graph instead of retracing.
    reduce_in_graph = _make_subgraph(reduce)

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        index_groups = _index_groups(grads, None if vars is None else list(vars), groups)
        if not any(g is not None for g in grads):
            return grads
        if _executing_eagerly():
            return list(reduce_in_graph(grads, index_groups, use_generic_names))
        return reduce(grads, index_groups, use_generic_names)

    return allreduce_grads


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set=global_process_set):
    """Returns `allreduce_grads(grads, vars=None, use_generic_names=False)`: the list of
    gradients reduced across `process_set` (None gradients stay None)."""
    groups = vars_to_refs(groups) if isinstance(groups, list) else groups
    return _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                           gradient_predivide_factor, groups, process_set)


def _check_common_options(op, gradient_predivide_factor, num_groups, groups):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
            raise ValueError("groups should be a non-negative integer or a list of list of tf.Variable.")
    return groups


# ---------------------------------------------------------------------------
# DistributedOptimizer (tf.compat.v1.train.Optimizer; Keras optimizers go to
# horovod.tensorflow.keras)

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _WrappedLegacyOptimizer(_LegacyOptimizer):
    """Base of the tf.compat.v1 wrappers: slots and variables are the wrapped optimizer's."""

    def get_slot(self, *args, **kwargs):
        """Delegates to the wrapped optimizer's get_slot()."""
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        """Delegates to the wrapped optimizer's get_slot_names()."""
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        """Delegates to the wrapped optimizer's variables()."""
        return self._optimizer.variables(*args, **kwargs)


class _DistributedOptimizer(_WrappedLegacyOptimizer):
    """Wraps a tf.compat.v1 optimizer so that the gradients it computes are allreduced across the
    ranks before they are applied to the weights.
    """

    def __init__(self, optimizer, name=None, use_locking=False, device_dense='',
                 device_sparse='', compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                 backward_passes_per_step=1, average_aggregated_gradients=False,
                 groups=None, process_set=global_process_set, scale_local_gradients=True):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super(_DistributedOptimizer, self).__init__(name=name, use_locking=use_locking)

        self._optimizer = optimizer
        self._allreduce_grads = _make_allreduce_grads_fn(
            name, device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set=process_set)
        self._local_vars = set()
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._agg_helper = None
        if backward_passes_per_step > 1:
            if _executing_eagerly():
                raise ValueError("backward_passes_per_step > 1 is not yet supported "
                                 "for _LegacyOptimizer with eager execution.")
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step=backward_passes_per_step,
                allreduce_func=self._allreduce_grads,
                sparse_as_dense=sparse_as_dense,
                average_aggregated_gradients=average_aggregated_gradients,
                rank=rank(),
                optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY,
                process_set=process_set,
                scale_local_gradients=scale_local_gradients,
                name=name)

    def register_local_var(self, var):
        """Marks `var` as local to this worker: its gradient is never exchanged with the other ranks
        and the locally computed value is used instead.
        """
        if self._agg_helper:
            self._agg_helper.register_local_var(var)
        else:
            self._local_vars.add(_var_ref(var))

    def compute_gradients(self, *args, **kwargs):
        """Computes the gradients with the wrapped optimizer (see Optimizer.compute_gradients()) and
        allreduces them across the ranks before returning them.

        Gradients of variables registered with register_local_var() keep their local value. With
        backward_passes_per_step > 1, the gradients are accumulated locally and exchanged only on
        every backward_passes_per_step-th call.
        """
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        grads, vars = zip(*gradients)
        if self._agg_helper:
            avg_grads = self._agg_helper.compute_gradients(grads, vars)
        else:
            avg_grads = reduce_except_local(self._allreduce_grads, grads, vars, self._local_vars,
                                            self.process_set, self.scale_local_gradients)
        return list(zip(avg_grads, vars))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Delegates to the wrapped optimizer's apply_gradients() (with local accumulation, only every
        backward_passes_per_step-th call really applies).
        """
        if self._agg_helper:
            grads_and_vars = list(grads_and_vars)
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name),
                self._optimizer, grads_and_vars, global_step=global_step, name=name)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)


class _DistributedAdasumOptimizer(_WrappedLegacyOptimizer):
    """op=Adasum for a tf.compat.v1 optimizer: each rank applies its own
    gradients with the wrapped optimizer, and the changes this made to the
    variables are combined across ranks with Adasum (Horovod's delta
    optimizer). compute_gradients() therefore returns local gradients. With
    backward_passes_per_step=k the local optimizer steps k times and the
    changes of those k steps are combined on the k-th call."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 backward_passes_per_step=1, process_set=global_process_set):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super(_DistributedAdasumOptimizer, self).__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression
        self._passes = backward_passes_per_step
        self.process_set = process_set

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's local gradients (the combination happens in apply_gradients)."""
        return self._optimizer.compute_gradients(*args, **kwargs)

    def _combine(self, variables, starts):
        changes = [v.read_value() - s for v, s in zip(variables, starts)]
        compressed = [self._compression.compress(c) for c in changes]
        combined = grouped_allreduce([c for c, _ in compressed], op=Adasum, process_set=self.process_set,
                                     name=self._name + "_delta")
        return tf.group(*[v.assign(s + self._compression.decompress(c, ctx), use_locking=self._use_locking)
                          for v, s, c, (_, ctx) in zip(variables, starts, combined, compressed)])

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the local update, then (every backward_passes_per_step calls)
        replaces each variable's change by the Adasum combination of all ranks'
        changes."""
        grads_and_vars = list(grads_and_vars)
        variables = [v for g, v in grads_and_vars if g is not None]
        if not self.process_set.included() or not variables:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        if self._passes == 1:
            starts = [tf.identity(v.read_value()) for v in variables]
            with tf.control_dependencies(starts):
                update = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
            with tf.control_dependencies([update]):
                return self._combine(variables, starts)
        # Several passes: where each window starts is kept in slots; a counter
        # says where in the window this call is.
        with tf.init_scope():  # variables live outside tf.function graphs
            self._create_non_slot_variable(initial_value=tf.constant(0, tf.int64), name="adasum_passes",
                                           colocate_with=variables[0])
            starts = [self._zeros_slot(v, "adasum_start", self._name) for v in variables]
            home = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        passes = self._get_non_slot_variable("adasum_passes", graph=home)
        window_starts = tf.equal(passes % self._passes, 0)
        snapshot = tf.cond(window_starts, lambda: tf.group(*[s.assign(v) for s, v in zip(starts, variables)]),
                           tf.no_op)
        with tf.control_dependencies([snapshot]):
            update = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        with tf.control_dependencies([update]):
            count = passes.assign_add(1)
        return tf.cond(tf.equal(count % self._passes, 0), lambda: self._combine(variables, starts), tf.no_op)


def _is_keras_optimizer(optimizer):
    if isinstance(optimizer, tf.keras.optimizers.Optimizer):
        return True
    # tf-keras (Keras 2) or a standalone Keras whose classes are not tf.keras'.
    return any(cls.__module__.split(".")[0] in ("keras", "tf_keras") and cls.__name__ == "Optimizer"
               for cls in type(optimizer).__mro__)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='',
                         device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False,
                         num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps `optimizer` for distributed training: the wrapped optimizer still computes the local
    gradients and applies the updates, but the gradients are combined across the ranks in between.

    Args:
      optimizer:
        The optimizer that computes gradients and applies updates: a
        tf.compat.v1.train.Optimizer, or a Keras optimizer (handed to
        horovod.tensorflow.keras.DistributedOptimizer).
      name:
        Optional prefix for the names of the ops created when gradients are applied;
        "Distributed" plus the class name of `optimizer` when not given.
      use_locking:
        Whether variable updates take locks (see Optimizer.__init__).
      device_dense:
        Device on which dense gradients are processed.
      device_sparse:
        Device on which sparse gradients are processed.
      compression:
        A compressor applied to gradients before they are exchanged, to cut the bytes
        sent at each update. Compression.none (no compression) by default.
      sparse_as_dense:
        When True, sparse gradients are converted to dense tensors before the exchange,
        which can be faster and leaner when they are not very sparse. False by default.
      backward_passes_per_step:
        How many backward passes to accumulate locally before the gradients are
        allreduced and applied, to combine several mini-batches into one update.
      op:
        The reduction used to combine gradients across the ranks.
      gradient_predivide_factor:
        Only with op == Average: moves part of the averaging before the sum. Gradients
        are multiplied by 1.0 / gradient_predivide_factor before summing and by
        gradient_predivide_factor / size afterwards.
      average_aggregated_gradients:
        With backward_passes_per_step > 1, whether the accumulated gradients are
        divided by backward_passes_per_step (averaged over the passes) rather than
        summed.
      num_groups:
        Deprecated in favour of `groups`: the number of groups the gradient allreduces are
        split into. 0 (no explicit grouping) by default.
      groups:
        How gradient allreduces are grouped: None (the default) for no explicit grouping;
        a positive integer to split them into that many groups; or a list of lists of
        tf.Variable, where the variables of each inner list are reduced together and every
        variable not listed is a group of its own.
      process_set: the ProcessSet over whose ranks the gradients are reduced; the global
        process set unless given.
      scale_local_gradients: whether the gradients of variables registered as local are
        divided by the process set's size, like the averaged ones. True by default.
    """
    groups = _check_common_options(op, gradient_predivide_factor, num_groups, groups)
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")

    if isinstance(optimizer, _LegacyOptimizer):
        if op == Adasum and size() > 1:
            return _DistributedAdasumOptimizer(optimizer, name=name, use_locking=use_locking,
                                               compression=compression,
                                               backward_passes_per_step=backward_passes_per_step,
                                               process_set=process_set)
        return _DistributedOptimizer(
            optimizer=optimizer, name=name, use_locking=use_locking, device_dense=device_dense,
            device_sparse=device_sparse, compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)
    if _is_keras_optimizer(optimizer):
        if op == Adasum:
            raise ValueError("op == Adasum is not supported yet with Keras")
        # Imported here: Keras is only loaded for users who use it.
        import horovod.tensorflow.keras as hvd_k
        return hvd_k.DistributedOptimizer(
            optimizer=optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)
    raise ValueError("Provided optimizer doesn't inherit from either legacy TensorFlow or Keras optimizer: %s"
                     % optimizer)


# ---------------------------------------------------------------------------
# DistributedGradientTape

class _DistributedGradientTape(object):
    """Mixed in front of the wrapped tape's class: gradient() reduces what the tape computed."""

    def _hvd_setup(self, device_dense, device_sparse, compression, sparse_as_dense, op,
                   gradient_predivide_factor, groups, process_set, scale_local_gradients):
        self._allreduce_grads = _make_allreduce_grads_fn(
            "DistributedGradientTape", device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """Marks `source` as local to this worker: its gradient is never exchanged with the other ranks
        and the locally computed value is returned instead.
        """
        self._local_sources.add(_var_ref(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        """Computes the gradient like tf.GradientTape.gradient(), then averages (or reduces with
        the tape's op) every gradient across the process set, except those of local sources.

        `use_generic_names` names the collectives grad_0, grad_1, ... (outside any name
        scope), for graphs whose tensor names differ between ranks.
        """
        grads = super(_DistributedGradientTape, self).gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads)
        reduced = reduce_except_local(
            lambda g, v: self._allreduce_grads(g, v, use_generic_names), flat_grads, flat_sources,
            self._local_sources, self.process_set, self.scale_local_gradients)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Computes the gradients as gradient() does and splits them by source.

        Returns:
          (local_vars_grads, global_vars_grads): lists of (variable, gradient)
          pairs, in the order of `sources`; the first for sources registered as
          local (their gradients are not reduced across ranks), the second for
          the others.
        """
        flat_sources = tf.nest.flatten(sources)
        grads = tf.nest.flatten(self.gradient(target, sources, output_gradients, use_generic_names))
        local_vars_grads, global_vars_grads = [], []
        for var, grad in zip(flat_sources, grads):
            is_local = _var_ref(var) in self._local_sources
            (local_vars_grads if is_local else global_vars_grads).append((var, grad))
        return local_vars_grads, global_vars_grads


_tape_classes = {}


def _distributed_tape_class(base):
    # One subclass per tape class (users may subclass tf.GradientTape), keeping
    # its name so isinstance() checks and reprs look as before.
    if base not in _tape_classes:
        _tape_classes[base] = type(base.__name__, (_DistributedGradientTape, base), {})
    return _tape_classes[base]


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False,
                            op=Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=global_process_set,
                            scale_local_gradients=True):
    """Wraps a tf.GradientTape so that the gradients it computes are allreduced across the ranks
    before they are returned, ready to be applied to the weights.

    Args:
      gradtape:
        The tf.GradientTape that records the computation and computes the gradients.
      device_dense:
        Device on which dense gradients are processed.
      device_sparse:
        Device on which sparse gradients are processed.
      compression:
        A compressor applied to gradients before they are exchanged, to cut the bytes
        sent at each update. Compression.none (no compression) by default.
      sparse_as_dense:
        When True, sparse gradients are converted to dense tensors before the exchange,
        which can be faster and leaner when they are not very sparse. False by default.
      op:
        The reduction used to combine gradients across the ranks.
      gradient_predivide_factor:
        Only with op == Average: moves part of the averaging before the sum. Gradients
        are multiplied by 1.0 / gradient_predivide_factor before summing and by
        gradient_predivide_factor / size afterwards.
      num_groups:
        Deprecated in favour of `groups`: the number of groups the gradient allreduces are
        split into. 0 (no explicit grouping) by default.
      groups:
        How gradient allreduces are grouped: None (the default) for no explicit grouping;
        a positive integer to split them into that many groups; or a list of lists of
        tf.Variable, where the variables of each inner list are reduced together and every
        variable not listed is a group of its own.
      process_set: the ProcessSet over whose ranks the gradients are reduced; the global
        process set unless given.
      scale_local_gradients: whether the gradients of sources registered as local are
        divided by the process set's size, like the averaged ones. True by default.
    """
    groups = _check_common_options(op, gradient_predivide_factor, num_groups, groups)
    cls = _distributed_tape_class(type(gradtape))
    tape = cls.__new__(cls)
    # The new object shares the wrapped tape's state (the recorded operations,
    # persistence, watched variables), so it works whether it is created
    # after the `with` block or wraps a fresh tape used as the context manager.
    tape.__dict__.update(gradtape.__dict__)
    tape._hvd_setup(device_dense, device_sparse, compression, sparse_as_dense, op, gradient_predivide_factor,
                    groups, process_set, scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """Like DistributedGradientTape, but the gradients of the layers in `local_layers` are not
    exchanged: they stay local to each rank and are applied as computed there.

    Args:
      gradtape:
        The tf.GradientTape that records the computation and computes the gradients.
      local_layers:
        A tf.keras.layers.Layer, or a collection of them, whose trainable weights keep
        rank-local gradients. Without it the tape behaves exactly like
        DistributedGradientTape.

    All other arguments mean what they mean for DistributedGradientTape.
    """
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, tf.keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
