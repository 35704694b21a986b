# mpi_ops.py - the TensorFlow ops of hvd-tensorflow (libhvd_tensorflow.so,
# built against the installed TensorFlow) as Python functions with Horovod's
# names and signatures, their gradients, and hvd-core's basics re-exported.
# This is the only module that touches the op library; everything else in
# horovod.tensorflow builds on the functions here.
"""Horovod's collective ops on TensorFlow tensors (``horovod.tensorflow.mpi_ops``)."""

import os
import re

import tensorflow as tf
from tensorflow.python.framework import ops as _ops

from horovod.common import _basics  # noqa: F401 - Horovod's tests reach it as mpi_ops._basics
from horovod.common import c_api
# One engine for every binding in the process: hvd.init() through
# horovod.tensorflow also initialises horovod.common and horovod.torch.
from horovod.common import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                            gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                            mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                            shutdown, size, start_timeline, stop_timeline)
from horovod.common import barrier as _core_barrier
from horovod.common.basics import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from horovod.common.exceptions import HorovodInternalError  # noqa: F401
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                         process_set_id_of, remove_process_set)

_HERE = os.path.dirname(os.path.abspath(__file__))
_OPS_LIBRARY = os.path.join(_HERE, "libhvd_tensorflow.so")
_XLA_LIBRARY = os.path.join(_HERE, "libhvd_tensorflow_xla.so")


def _load_libraries():
    try:
        from horovod.tensorflow import _build_info
    except ImportError as e:
        raise ImportError("horovod.tensorflow: the compiled ops are missing (no _build_info.py next to %s); "
                          "reinstall with `pip install --no-build-isolation hvd-tensorflow` in an environment "
                          "where TensorFlow is installed" % _HERE) from e
    if _build_info.TENSORFLOW_VERSION != tf.__version__:
        raise ImportError(
            "horovod.tensorflow was built against TensorFlow %s, but TensorFlow %s is installed: its ops "
            "would not load. Reinstall hvd-tensorflow so it is compiled against this TensorFlow: "
            "pip install --no-build-isolation --no-cache-dir --force-reinstall hvd-tensorflow"
            % (_build_info.TENSORFLOW_VERSION, tf.__version__))
    # Load libhvd_core first: the op library's dependency on it then resolves
    # (by SONAME) to this very copy, so ops and Python share one engine.
    c_api.lib()
    library = tf.load_op_library(_OPS_LIBRARY)
    xla = False
    if _build_info.XLA_BUILT and os.path.exists(_XLA_LIBRARY) and \
            os.environ.get("HOROVOD_ENABLE_XLA_OPS", "1").strip().lower() not in ("0", "false", "no"):
        tf.load_library(_XLA_LIBRARY)
        xla = True
    return library, xla


MPI_LIB, _XLA_LOADED = _load_libraries()


def xla_built():
    """True when the XLA custom calls (``tf.function(jit_compile=True)``) are loaded."""
    return _XLA_LOADED


def _normalize_name(name):
    """Turns a TF tensor name into a valid op name."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _op_name(prefix, tensor, name):
    # In graph mode the node name is the engine's key, so it must be the same
    # on every rank: derive it from the input tensor's name. Eager ops run one
    # at a time per thread and keep TF's own (op type) name.
    if name is None and not tf.executing_eagerly():
        return "%s_%s" % (prefix, _normalize_name(tensor.name))
    return name


def _reduce_op(op):
    if op not in (Average, Sum, Adasum, Min, Max, Product):
        raise ValueError("op must be one of hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product; "
                         "got %r" % (op,))
    return op


def _check_list(tensors, what):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError("%s needs a non-empty list of tensors" % what)
    return [tf.convert_to_tensor(t) for t in tensors]


# ---------------------------------------------------------------------------
# allreduce

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set=global_process_set):
    """Reduces `tensor` over the ranks of `process_set`; op is a Horovod reduce op (Sum, Average, ...)."""
    tensor = tf.convert_to_tensor(tensor)
    return MPI_LIB.horovod_allreduce(tensor, name=_op_name("HorovodAllreduce", tensor, name),
                                     reduce_op=_reduce_op(op), prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                     process_set_id=process_set_id_of(process_set),
                                     submitter_blocked=tf.executing_eagerly())


@_ops.RegisterGradient("HorovodAllreduce")
def _allreduce_grad(op, grad):
    # For Sum and Average the input's gradient is the same reduction of the
    # output gradients (Horovod's convention for the other ops too).
    return _allreduce(grad, op=op.get_attr("reduce_op"), prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"),
                      process_set=_process_set_of(op))


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """Reduces every tensor of `tensors` as one negotiated, fused group."""
    tensors = _check_list(tensors, "grouped_allreduce")
    return MPI_LIB.horovod_grouped_allreduce(
        tensors, name=_op_name("HorovodGroupedAllreduce", tensors[0], name), reduce_op=_reduce_op(op),
        prescale_factor=prescale_factor, postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
        process_set_id=process_set_id_of(process_set),
        submitter_blocked=tf.executing_eagerly())


@_ops.RegisterGradient("HorovodGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=op.get_attr("reduce_op"),
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"), process_set=_process_set_of(op))


# ---------------------------------------------------------------------------
# allgather

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates `tensor` from every rank along the first dimension (sizes may differ per rank)."""
    tensor = tf.convert_to_tensor(tensor)
    return MPI_LIB.horovod_allgather(tensor, name=_op_name("HorovodAllgather", tensor, name),
                                     ignore_name_scope=ignore_name_scope,
                                     process_set_id=process_set_id_of(process_set),
                                     submitter_blocked=tf.executing_eagerly())


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgathers every tensor of `tensors` as one group."""
    tensors = _check_list(tensors, "grouped_allgather")
    return MPI_LIB.horovod_grouped_allgather(tensors, name=_op_name("HorovodGroupedAllgather", tensors[0], name),
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=process_set_id_of(process_set),
                                             submitter_blocked=tf.executing_eagerly())


def _allgather_grad_of(x, grad, process_set):
    # Every rank's output holds this rank's rows, so their gradient is the
    # average over ranks of the output gradient, narrowed to our rows.
    grad = _allreduce(grad, op=Average, process_set=process_set)
    dim0 = tf.shape(x, out_type=tf.int64)[:1]
    dims = allgather(dim0, process_set=process_set)
    offset = tf.reduce_sum(dims[:_rank_in(process_set)])
    # Explicit sizes, not -1: XLA (jit_compile) cannot lower a slice with a
    # computed start and a -1 size.
    return tf.slice(grad, tf.concat([[offset], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0),
                    tf.concat([dim0, tf.shape(grad, out_type=tf.int64)[1:]], 0))


@_ops.RegisterGradient("HorovodAllgather")
def _allgather_grad(op, grad):
    return _allgather_grad_of(op.inputs[0], grad, _process_set_of(op))


@_ops.RegisterGradient("HorovodGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    process_set = _process_set_of(op)
    return [_allgather_grad_of(x, g, process_set) for x, g in zip(op.inputs, grads)]


# ---------------------------------------------------------------------------
# broadcast

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Returns `tensor` as sent by `root_rank` (a global rank that belongs to `process_set`)."""
    tensor = tf.convert_to_tensor(tensor)
    return MPI_LIB.horovod_broadcast(tensor, name=_op_name("HorovodBroadcast", tensor, name), root_rank=root_rank,
                                     ignore_name_scope=ignore_name_scope,
                                     process_set_id=process_set_id_of(process_set),
                                     submitter_blocked=tf.executing_eagerly())


@_ops.RegisterGradient("HorovodBroadcast")
def _broadcast_grad(op, grad):
    # Only the root's input reaches the outputs: it gets the average of the
    # ranks' output gradients, every other rank zeros (Horovod's rule).
    process_set = _process_set_of(op)
    grad = _allreduce(grad, op=Average, process_set=process_set)
    if rank() != op.get_attr("root_rank"):  # a global rank, also on process sets
        grad = grad * 0
    return grad


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites each tf.Variable of `variables` with `root_rank`'s value, in place.

    Variables of several dtypes become one op per dtype. Returns `variables`
    when executing eagerly; in a graph, their values read after the
    broadcast, so that running them (e.g. in a TF1 session) runs it.
    """
    variables = list(variables)
    if not variables:
        return variables
    # TF1 reference variables (graph mode) have no resource handle for the
    # in-place kernel: their root value is broadcast and assigned back instead.
    assigned = {}
    refs = [v for v in variables if not hasattr(v, "handle")]
    for i, v in enumerate(refs):
        ref_name = None if name is None else "%s_ref%d" % (name, i)
        assigned[id(v)] = tf.compat.v1.assign(
            v, broadcast(v, root_rank, name=ref_name, process_set=process_set))
    by_dtype = {}
    for v in variables:
        if id(v) not in assigned:
            by_dtype.setdefault(v.dtype.base_dtype, []).append(v)
    ps_id = process_set_id_of(process_set)
    broadcasts = []
    for dtype, group in by_dtype.items():
        op_name = name
        if op_name is None and not tf.executing_eagerly():
            op_name = "HorovodBroadcastInplace_%s" % _normalize_name(group[0].name)
        if op_name is not None and len(by_dtype) > 1:
            op_name = "%s_%s" % (op_name, dtype.name)
        broadcasts.append(MPI_LIB.horovod_broadcast_inplace_resource(
            [v.handle for v in group], root_rank=root_rank, T=dtype, name=op_name, process_set_id=ps_id,
            submitter_blocked=tf.executing_eagerly()))
    if tf.executing_eagerly():
        return variables
    with tf.control_dependencies(broadcasts):
        return [assigned[id(v)] if id(v) in assigned else v.read_value() for v in variables]


# ---------------------------------------------------------------------------
# alltoall

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends `splits[i]` first-dimension rows of `tensor` to rank i of the set (evenly when None).

    Returns:
        With `splits` given: (output, received_splits), the rows received,
        concatenated in rank order, and how many came from each rank.
        With `splits=None`: `output` alone, as Horovod returns it.
    """
    tensor = tf.convert_to_tensor(tensor)
    if splits is None:
        splits_ = tf.zeros([0], dtype=tf.int32)
    else:
        splits_ = tf.cast(tf.convert_to_tensor(splits), tf.int32)
    output, received_splits = MPI_LIB.horovod_alltoall(
        tensor, splits_, name=_op_name("HorovodAlltoall", tensor, name),
        ignore_name_scope=ignore_name_scope, process_set_id=process_set_id_of(process_set),
        submitter_blocked=tf.executing_eagerly())
    return (output, received_splits) if splits is not None else output


@_ops.RegisterGradient("HorovodAlltoall")
def _alltoall_grad(op, grad, grad_received_splits):
    # The gradient travels back the way the rows came.
    result, _ = alltoall(grad, splits=op.outputs[1], process_set=_process_set_of(op))
    return [result, None]


# ---------------------------------------------------------------------------
# reducescatter

def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the ranks; returns this rank's block of the first dimension."""
    tensor = tf.convert_to_tensor(tensor)
    if op not in (Average, Sum):
        raise ValueError("reducescatter supports hvd.Average and hvd.Sum, got op=%r" % (op,))
    return MPI_LIB.horovod_reducescatter(tensor, name=_op_name("HorovodReducescatter", tensor, name), reduce_op=op,
                                         prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                         ignore_name_scope=ignore_name_scope,
                                         process_set_id=process_set_id_of(process_set),
                                         submitter_blocked=tf.executing_eagerly())


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters every tensor of `tensors` as one group."""
    tensors = _check_list(tensors, "grouped_reducescatter")
    if op not in (Average, Sum):
        raise ValueError("grouped_reducescatter supports hvd.Average and hvd.Sum, got op=%r" % (op,))
    return MPI_LIB.horovod_grouped_reducescatter(
        tensors, name=_op_name("HorovodGroupedReducescatter", tensors[0], name), reduce_op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
        process_set_id=process_set_id_of(process_set),
        submitter_blocked=tf.executing_eagerly())


def _reducescatter_grad_of(op, grad, process_set):
    # Every input row reaches exactly one rank's block: gather the blocks'
    # gradients back. The scale follows Horovod's convention (the same as the
    # allreduce gradient's, an allreduce with the forward op): Sum multiplies by
    # the set's size, Average by one, so that existing training scripts keep
    # their gradient magnitudes; pre/postscale apply as in the forward pass.
    result = allgather(grad, process_set=process_set)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == Sum:
        scale *= process_set.size()
    return result * scale if scale != 1.0 else result


@_ops.RegisterGradient("HorovodReducescatter")
def _reducescatter_grad(op, grad):
    return _reducescatter_grad_of(op, grad, _process_set_of(op))


@_ops.RegisterGradient("HorovodGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    process_set = _process_set_of(op)
    return [_reducescatter_grad_of(op, g, process_set) for g in grads]


# ---------------------------------------------------------------------------
# join, barrier, topology ops

def join():
    """Blocks until every rank has called join(); returns the last rank to join (an int32 scalar tensor).

    Ranks that have not joined yet keep running collectives; joined ranks
    take part with zeros.
    """
    return MPI_LIB.horovod_join()


def barrier(process_set=global_process_set):
    """Blocks until every rank of `process_set` reaches the barrier (eager; runs on the engine directly)."""
    _core_barrier(process_set=process_set)


def size_op(process_set_id=0, name=None):
    """Number of ranks in the process set, as an int32 tensor evaluated when the graph runs."""
    return MPI_LIB.horovod_size(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    """Number of ranks on this host, as an int32 tensor evaluated when the graph runs."""
    return MPI_LIB.horovod_local_size(name=name)


def rank_op(name=None):
    """This process's rank, as an int32 tensor evaluated when the graph runs."""
    return MPI_LIB.horovod_rank(name=name)


def local_rank_op(name=None):
    """This process's rank on its host, as an int32 tensor evaluated when the graph runs."""
    return MPI_LIB.horovod_local_rank(name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this process belongs to the process set, else 0 (int32 tensor)."""
    return MPI_LIB.horovod_process_set_included(process_set_id=process_set_id, name=name)


# ---------------------------------------------------------------------------
# helpers for the gradients

def _process_set_of(op):
    ps_id = op.get_attr("process_set_id")
    if ps_id == 0:
        return global_process_set
    # A handle on the engine's set: rank() and size() ask the engine by id.
    process_set = ProcessSet([])
    process_set.process_set_id = ps_id
    return process_set


def _rank_in(process_set):
    r = process_set.rank()
    if r is None or r < 0:
        raise ValueError("this process (rank %d) is not a member of %s" % (rank(), process_set))
    return r
