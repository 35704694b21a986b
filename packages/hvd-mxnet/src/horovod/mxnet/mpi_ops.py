# mpi_ops.py - Horovod's collectives on mx.nd.NDArray. Allreduce and
# broadcast (single and grouped, in place or not) run on MXNet's engine,
# asynchronously, through _engine_bridge: they return at once and the
# results are ready for whatever reads them next. Allgather, alltoall and
# reducescatter, whose result shape only negotiation tells, are pushed the
# same way and then waited for (as Horovod's MXNet binding does). Failures
# are MXNetError, raised on every rank.
"""Collective operations on MXNet NDArrays."""

import mxnet as mx
import numpy as np

from horovod.common import _basics  # noqa: F401  (Horovod code imports mpi_ops._basics)
from horovod.common import c_api
from horovod.common import collectives as _np_collectives
from horovod.common.basics import Adasum, Average, HorovodBasics, Max, Min, Product, Sum  # noqa: F401
from horovod.common.engine_calls import copy_owned_result, group_tensor_names, owned_address, received_splits, result
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                         remove_process_set)
from horovod.common.process_sets import process_set_id_of as _process_set_id
from horovod.common.util import get_average_backwards_compatibility_fun
from horovod.mxnet import _engine_bridge as _bridge

# One engine state for every binding in the process: hvd.init() through
# horovod.mxnet also initialises horovod.common, as Horovod's frameworks did.
from horovod.common import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: E402,F401
                            gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                            mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                            shutdown, size, start_timeline, stop_timeline)

handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(HorovodBasics)

__all__ = [
    "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather", "grouped_allgather",
    "broadcast", "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
]


class AdasumNotSupportedError(NotImplementedError, AssertionError):
    """op=Adasum given to horovod.mxnet. Horovod's MXNet binding refuses it
    with an assert, so this is an AssertionError as well."""


def _check_op(op, what):
    if op == Adasum:
        raise AdasumNotSupportedError("%s: op=Adasum is not supported by horovod.mxnet, as in Horovod's MXNet "
                                      "binding; use Average or Sum (Adasum is available in horovod.torch and "
                                      "horovod.tensorflow)" % what)


def _check_tensors(tensors, what="tensor"):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError("%s must be a non-empty list of NDArrays" % what)
    for t in tensors:
        _bridge.check_supported(t, what)


def _push_reduction(tensors, outputs, name, op, priority, prescale_factor, postscale_factor, process_set,
                    collective_name, root_rank=0, collective=c_api.ALLREDUCE):
    """Pushes one allreduce or broadcast of `tensors` into `outputs` on MXNet's engine."""
    names = group_tensor_names(collective_name, name, len(tensors))
    in_place = all(t is o for t, o in zip(tensors, outputs))
    const = [] if in_place else list(tensors)
    body = _bridge.enqueue_in_engine(collective, list(tensors), list(outputs), names, _process_set_id(process_set),
                                     reduce_op=op, root_rank=root_rank, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor)
    _bridge.push(body, const, list(outputs), priority, "Horovod" + collective_name.title().replace("_", ""))


def _zeros_like(tensor):
    return mx.nd.zeros(shape=tensor.shape, ctx=tensor.context, dtype=tensor.dtype)


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, op=None):
    """Reduces `tensor` over every rank of `process_set` into a new NDArray; `tensor` is left as it is.

    Ranks pair operations up by `name` (an automatic name when None): every
    rank submits an array of the same shape and dtype under it, and the
    operation starts when all have. It runs on MXNet's engine after whatever
    writes `tensor`; reading the result waits for it.

    Args:
        tensor: the NDArray to reduce (CPU).
        average: deprecated, use `op`.
        name: the operation's name.
        priority: MXNet engine priority; higher runs earlier.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after it.
        process_set: the ranks that take part (default: all).
        op: Sum, Average (default), Min, Max or Product.

    Returns:
        An NDArray with `tensor`'s shape and dtype holding the reduction.
        A failure (mismatched arrays, a lost peer) is raised as MXNetError by
        the first wait on it (asnumpy(), wait_to_read(), ...), on every rank.
    """
    op = handle_average_backwards_compatibility(op, average)
    _check_op(op, "allreduce")
    _check_tensors([tensor])
    output = _zeros_like(tensor)
    _push_reduction([tensor], [output], name, op, priority, prescale_factor, postscale_factor, process_set,
                    "allreduce")
    return output


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """allreduce() into `tensor` itself; returns `tensor`."""
    op = handle_average_backwards_compatibility(op, average)
    _check_op(op, "allreduce_")
    _check_tensors([tensor])
    _push_reduction([tensor], [tensor], name, op, priority, prescale_factor, postscale_factor, process_set,
                    "allreduce")
    return tensor


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, op=None):
    """Reduces a list of NDArrays as one operation (negotiated and fused together) into new NDArrays.

    Arguments as allreduce(); the group's tensors are named ``<name>_<i>``.

    Returns:
        A list of NDArrays, one per input.
    """
    op = handle_average_backwards_compatibility(op, average)
    _check_op(op, "grouped_allreduce")
    _check_tensors(tensors, "tensors")
    outputs = [_zeros_like(t) for t in tensors]
    _push_reduction(tensors, outputs, name, op, priority, prescale_factor, postscale_factor, process_set,
                    "grouped_allreduce" if len(tensors) > 1 else "allreduce")
    return outputs


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, op=None):
    """grouped_allreduce() into the input NDArrays themselves; returns them."""
    op = handle_average_backwards_compatibility(op, average)
    _check_op(op, "grouped_allreduce_")
    _check_tensors(tensors, "tensors")
    _push_reduction(tensors, tensors, name, op, priority, prescale_factor, postscale_factor, process_set,
                    "grouped_allreduce" if len(tensors) > 1 else "allreduce")
    return tensors


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Copies `tensor` from `root_rank` (a global rank) to every rank of `process_set`, into a new NDArray.

    Returns:
        An NDArray holding the root's values (asynchronously, like allreduce()).
    """
    _check_tensors([tensor])
    output = tensor.copy()
    _push_reduction([output], [output], name, Sum, priority, 1.0, 1.0, process_set, "broadcast", root_rank,
                    c_api.BROADCAST)
    return output


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """broadcast() into `tensor` itself; returns `tensor`."""
    _check_tensors([tensor])
    _push_reduction([tensor], [tensor], name, Sum, priority, 1.0, 1.0, process_set, "broadcast", root_rank,
                    c_api.BROADCAST)
    return tensor


# ---------------------------------------------------------------------------
# Collectives whose result shape only the negotiation tells: pushed on the
# engine like the others (after their inputs' writers, by priority), then
# waited for, and their results copied into new NDArrays (Horovod's binding
# also waits for them before returning).

HorovodMXNetValueError = _bridge.HorovodMXNetValueError


def _as_mxnet_error(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - hvd's errors surface as MXNet's, as in Horovod
        raise _bridge.mxnet_error(e) from e


def _owned_result(handle, index, like):
    """Result `index` of a finished handle, copied into a new NDArray of `like`'s dtype, and
    the rows it received from each rank (alltoall; read first: the copy frees the core's result)."""
    res = result(handle, index)
    splits = received_splits(res)

    def allocate(shape):
        out = mx.nd.empty(shape, ctx=like.context, dtype=like.dtype)
        return out, _bridge.data_pointer(out)

    return copy_owned_result(owned_address(res), allocate), splits


def _run_gather_like(collective, collective_name, tensors, name, priority, process_set, **enqueue_args):
    """Runs allgather, alltoall or reducescatter of `tensors`; returns [(NDArray, received splits)] per tensor."""
    names = group_tensor_names(collective_name, name, len(tensors))
    handle = _bridge.run_and_wait(collective, list(tensors), names, _process_set_id(process_set), priority,
                                  "Horovod" + collective_name.title().replace("_", ""), **enqueue_args)
    try:
        return [_owned_result(handle, i, t) for i, t in enumerate(tensors)]
    finally:
        _bridge.release(handle)


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates `tensor` from every rank of `process_set` along the first dimension.

    The first dimension may differ between ranks; the others must match.

    Returns:
        A new NDArray: the ranks' tensors in rank order.
    """
    _check_tensors([tensor])
    return _run_gather_like(c_api.ALLGATHER, "allgather", [tensor], name, priority, process_set)[0][0]


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """allgather() of a list of NDArrays as one operation; returns a list of new NDArrays."""
    _check_tensors(tensors, "tensors")
    return [out for out, _ in _run_gather_like(c_api.ALLGATHER, "grouped_allgather", tensors, name, priority,
                                               process_set)]


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends slices of `tensor`'s first dimension to the ranks of `process_set` and concatenates what each sends.

    Args:
        splits: how many rows go to each rank, in rank order (an NDArray, list
            or None: even split, the first dimension must divide by the set's size).

    Returns:
        The received NDArray; with `splits`, also an int32 NDArray of the rows
        received from each rank.
    """
    _check_tensors([tensor])
    split_list = None
    if splits is not None:
        if isinstance(splits, mx.nd.NDArray):
            if np.dtype(splits.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
                raise ValueError("splits must be an integer NDArray (int32), got %s"
                                 % _bridge.dtype_name(splits.dtype))
            split_list = [int(s) for s in splits.asnumpy().reshape(-1)]
        else:
            split_list = [int(s) for s in splits]
    [(received, from_each)] = _run_gather_like(c_api.ALLTOALL, "alltoall", [tensor], name, priority, process_set,
                                         splits=[split_list])
    if splits is None:
        return received
    return received, mx.nd.array(from_each, ctx=mx.cpu(), dtype="int32")


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over the ranks of `process_set` and gives each rank its slice of the first dimension.

    Ranks get consecutive slices; when the first dimension does not divide by
    the set's size, the first ranks get one row more.

    Returns:
        This rank's slice of the reduction, a new NDArray.
    """
    _check_op(op, "reducescatter")
    _check_tensors([tensor])
    return _run_gather_like(c_api.REDUCESCATTER, "reducescatter", [tensor], name, priority, process_set,
                            reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor)[0][0]


def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter() of a list of NDArrays as one operation; returns a list of new NDArrays."""
    _check_op(op, "grouped_reducescatter")
    _check_tensors(tensors, "tensors")
    return [out for out, _ in _run_gather_like(c_api.REDUCESCATTER, "grouped_reducescatter", tensors, name,
                                               priority, process_set, reduce_op=op, prescale_factor=prescale_factor,
                                               postscale_factor=postscale_factor)]


def barrier(process_set=global_process_set):
    """Blocks until every rank of `process_set` has reached this call."""
    _as_mxnet_error(_np_collectives.barrier, process_set)


def join():
    """Declares that this rank has no more data and blocks until every rank has joined.

    Until then the other ranks' allreduces go on, with this rank contributing zeros.

    Returns:
        The rank that joined last.
    """
    mx.nd.waitall()  # this rank's pushed operations are submitted before it joins
    return _as_mxnet_error(_np_collectives.join)
