# collectives.py - the framework-level collectives of horovod.tensorflow:
# allreduce, grouped_allreduce, reducescatter and grouped_reducescatter over
# mpi_ops' raw ops, adding compression, the deprecated `average` argument,
# tf.IndexedSlices (reduced by allgathering their rows) and groups of mixed
# dtypes; plus the _allreduce_cond helpers that skip the exchange where a
# process set has nothing to exchange with.
"""Allreduce and reduce-scatter of tf.Tensor and tf.IndexedSlices."""

import os

import tensorflow as tf

from horovod.common.util import get_average_backwards_compatibility_fun, num_rank_is_power_2
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import (Adasum, Average, Sum, _allreduce, _grouped_allreduce, _grouped_reducescatter,
                                        _reducescatter, allgather, global_process_set, grouped_allgather,
                                        process_set_included_op, size_op)


class _ReduceOps:
    Average, Sum = Average, Sum


handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_ReduceOps)
check_num_rank_power_of_2 = num_rank_is_power_2


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
