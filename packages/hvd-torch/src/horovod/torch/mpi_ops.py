# mpi_ops.py - Horovod's collective API on torch tensors: allreduce,
# allgather, broadcast, alltoall, reducescatter (plain, in-place, async and
# grouped), their autograd functions, poll/synchronize, join and barrier.
# Handles, names and process sets come from horovod.common.handles; this
# module only turns tensors into descriptors and results back into tensors.
"""Collective operations on PyTorch tensors (``horovod.torch.mpi_ops``)."""

import ctypes

import torch

from horovod.common import _basics
from horovod.common import c_api
from horovod.common.basics import Adasum, Average, HorovodBasics, Max, Min, Product, Sum  # noqa: F401
from horovod.common.exceptions import HorovodCollectiveMismatchError as _CoreMismatchError
from horovod.common.exceptions import HorovodInternalError
from horovod.common.handles import HandleManager, TensorDesc, full_name, result, run_sync
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                         remove_process_set)
from horovod.common.process_sets import process_set_id_of as _process_set_id
from horovod.common.util import get_average_backwards_compatibility_fun

from horovod.torch.compression import Compression

__all__ = [
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "poll", "synchronize", "join", "barrier", "HorovodCollectiveMismatchError",
]

# One engine state for every binding in the process: sharing hvd-core's
# HorovodBasics means hvd.init() through horovod.torch also initialises
# horovod.common (and the other way round), as Horovod's frameworks did.
from horovod.common import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: E402,F401
                            gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                            mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                            shutdown, size, start_timeline, stop_timeline)

handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(HorovodBasics)


class HorovodCollectiveMismatchError(HorovodInternalError, _CoreMismatchError):
    """The ranks disagree about a collective (shape, dtype, operation, root rank,
    scale factors or process set for the same tensor name).

    Horovod's torch binding reports every failed collective as
    ``HorovodInternalError``; this class is one, so existing ``except`` clauses
    keep working, and it is also hvd-core's ``HorovodCollectiveMismatchError``
    for code that wants to tell a mismatch (the engine stays usable) from a
    failed peer. Raised on every rank that took part.
    """


_handles = HandleManager()
_basics.add_shutdown_callback(_handles.clear)

# torch dtype -> DLPack (type code, bits)
_DLPACK_TYPES = {
    torch.uint8: (c_api.kDLUInt, 8), torch.int8: (c_api.kDLInt, 8), torch.int16: (c_api.kDLInt, 16),
    torch.int32: (c_api.kDLInt, 32), torch.int64: (c_api.kDLInt, 64),
    torch.float16: (c_api.kDLFloat, 16), torch.bfloat16: (c_api.kDLBfloat, 16),
    torch.float32: (c_api.kDLFloat, 32), torch.float64: (c_api.kDLFloat, 64), torch.bool: (c_api.kDLBool, 8),
}


def _describe(tensor):
    """The TensorDesc of a CPU tensor, after Horovod's input checks."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("Expected a torch.Tensor, got %s" % type(tensor).__name__)
    code_bits = _DLPACK_TYPES.get(tensor.dtype)
    if code_bits is None:
        raise ValueError("Tensor type %s is not supported." % tensor.dtype)
    if tensor.is_sparse:
        raise ValueError("Sparse tensors are not supported here; use sparse_allreduce_async.")
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    return TensorDesc(tensor.data_ptr(), tensor.shape, *code_bits)


def _describe_like(tensor, desc):
    """The TensorDesc of `tensor`, made by the caller with the shape and dtype of `desc`."""
    return TensorDesc(tensor.data_ptr(), desc.shape, desc.code, desc.bits)


def _to_host(tensor):
    """The tensor the engine reads: `tensor` itself on the CPU; for device tensors
    (CUDA, ...) a host copy. The engine moves host memory only until its GPU
    transports land, so device tensors are staged through the CPU."""
    if not isinstance(tensor, torch.Tensor) or tensor.is_cpu:
        return tensor
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    if tensor.is_cuda:
        # Page-locked memory from torch's caching host allocator: copies at
        # full bus speed, and the buffer is reused by later calls.
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor.detach())
        return host
    return tensor.detach().to("cpu")


def _tensor_names(collective, name, count):
    if count == 1:
        return [full_name(collective, name)]
    return [full_name(collective, "%s_%d" % (name, i)) if name else b"" for i in range(count)]


def _raise_torch_error(error):
    """Re-raises a core mismatch error as the class Horovod's torch users catch."""
    if isinstance(error, _CoreMismatchError) and not isinstance(error, HorovodCollectiveMismatchError):
        raise HorovodCollectiveMismatchError(str(error)) from None
    raise error


def _run_sync(*args, **kwargs):
    try:
        run_sync(*args, **kwargs)
    except _CoreMismatchError as e:
        _raise_torch_error(e)


def _needs_grad(tensor):
    # Going through the autograd Functions only when a gradient can flow
    # keeps their overhead off plain (e.g. optimizer) calls.
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


def _compiling():
    # Inside torch.compile the collectives go through the torch.library custom
    # ops (horovod.torch.custom_ops), which Dynamo can put in a graph; eager
    # calls skip the op dispatcher, whose overhead dominates small collectives.
    return torch.compiler.is_compiling()


# ---------------------------------------------------------------------------
# allreduce

def _allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set, collective,
                     single, caller_waits=False):
    """Enqueues an allreduce of `tensors` into `outputs` (which may be the tensors
    themselves); synchronize() returns outputs[0] when `single`, else the list."""
    ps_id = _process_set_id(process_set)
    hosts = [_to_host(t) for t in tensors]
    # A staged input is a private copy: reduce into it, then copy to the output.
    host_outs = [h if o is t or h is not t else _to_host(o) for t, o, h in zip(tensors, outputs, hosts)]
    inputs = [_describe(h) for h in hosts]
    outs = [_describe(o) for o in host_outs]

    def finish(_):
        for out, host_out in zip(outputs, host_outs):
            if out is not host_out:  # staged device tensor: bring the result back
                out.copy_(host_out)
        return outputs[0] if single else list(outputs)

    return _handles.submit(finish, [tensors, outputs, hosts, host_outs], c_api.ALLREDUCE, inputs,
                           _tensor_names(collective, name, len(tensors)), ps_id, outputs=outs, reduce_op=op,
                           prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                           caller_waits=caller_waits)


def _allreduce_now(tensor, op, name, prescale_factor, postscale_factor, process_set_id, output=None):
    """Synchronous single-tensor allreduce into `output` (a new tensor when None).

    The latency-critical path: small allreduces cost little more than the
    engine's own work, so checks and descriptors are made once.
    """
    host = tensor if isinstance(tensor, torch.Tensor) and tensor.is_cpu else _to_host(tensor)
    desc = _describe(host)
    if (output is tensor and host is tensor) or host is not tensor:
        # In place, or a staged (private) copy of a device tensor.
        host_out, out_desc = host, desc
    else:
        host_out = torch.empty_like(host)  # contiguous: `host` passed _describe
        out_desc = _describe_like(host_out, desc)
    _run_sync(c_api.ALLREDUCE, desc, out_desc, full_name("allreduce", name), process_set_id, op, 0,
              prescale_factor, postscale_factor, keepalive=(host, host_out))
    if output is None:
        return host_out if host is tensor else host_out.to(tensor.device)
    if host_out is not output:
        output.copy_(host_out)
    return output


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """A function that performs asynchronous averaging or summation of the input tensor
    over all the Horovod processes. The input tensor is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    Arguments:
        tensor: A tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A name of the reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the allreduce operation that can be used with `poll()` or
        `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    output = torch.empty_like(tensor) if isinstance(tensor, torch.Tensor) else None
    return _allreduce_async([tensor], [output], name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce", True)


def _allreduce_grad(grad, op, prescale_factor, postscale_factor, process_set):
    # For Sum and Average the input's gradient is the same reduction of the
    # output gradients; for Min/Max/Product this is Horovod's convention, not
    # the exact derivative, kept so results match Horovod's.
    return allreduce(grad.contiguous(), op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                     process_set=process_set)


class HorovodAllreduce(torch.autograd.Function):
    """An autograd function that performs allreduce on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return _allreduce_now(tensor, op, name, prescale_factor, postscale_factor, _process_set_id(process_set))

    @staticmethod
    def backward(ctx, grad_output):
        return (_allreduce_grad(grad_output, ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set),
                None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """A function that performs averaging or summation of the input tensor over all the
    Horovod processes. The input tensor is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    This acts as a thin wrapper around an autograd function.  If your input
    tensor requires gradients, then callings this function will allow gradients
    to be computed and backpropagated.

    Arguments:
        tensor: A tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A name of the reduction operation.
        compression: Compression algorithm used during allreduce to reduce the amount
                     of data sent during the each parameter update step.  Defaults to
                     not using compression.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A tensor of the same shape and type as `tensor`, averaged or summed across all
        processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensor_compressed, ctx = compression.compress(tensor)
    if _compiling():
        reduced = torch.ops.hvd.allreduce(tensor_compressed, op, name or "", float(prescale_factor),
                                          float(postscale_factor), _process_set_id(process_set))
    elif _needs_grad(tensor_compressed):
        reduced = HorovodAllreduce.apply(tensor_compressed, name, op, prescale_factor, postscale_factor,
                                         process_set)
    else:
        reduced = _allreduce_now(tensor_compressed, op, name, prescale_factor, postscale_factor,
                                 _process_set_id(process_set))
    return compression.decompress(reduced, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """A function that performs asynchronous in-place averaging or summation of the input
    tensor over all the Horovod processes.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    Arguments:
        tensor: A tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A name of the reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the allreduce operation that can be used with `poll()` or
        `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async([tensor], [tensor], name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce", True)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """A function that performs in-place averaging or summation of the input tensor over
    all the Horovod processes.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    Arguments:
        tensor: A tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A name of the reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A tensor of the same shape and type as `tensor`, averaged or summed across all
        processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_now(tensor, op, name, prescale_factor, postscale_factor, _process_set_id(process_set),
                          output=tensor)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """A function that performs asynchronous averaging or summation of the input tensor
    list over all the Horovod processes. The input tensors are not modified.

    The reduction operations are keyed by the base name. If a base name is not
    provided, an incremented auto-generated base name is used. Reductions are
    performed across tensors in the same list position. The tensor type and
    shape must be the same on all Horovod processes for tensors sharing
    positions in the input tensor list. The reduction will not start until all
    processes are ready to send and receive the tensors.

    Arguments:
        tensors: A list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A base name to use for the group reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensors before allreduce.
        postscale_factor: Multiplicative factor to scale tensors after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the group allreduce operation that can be used with `poll()` or
        `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    outputs = [torch.empty_like(t) if isinstance(t, torch.Tensor) else None for t in tensors]
    return _allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set,
                            "grouped_allreduce", False)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """An autograd function that performs allreduce on a list of tensors."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        outputs = [torch.empty_like(t) for t in tensors]
        # caller_waits: this thread runs the engine while it waits (no hand-off).
        handle = _allreduce_async(list(tensors), outputs, name, op, prescale_factor, postscale_factor,
                                  process_set, "grouped_allreduce", False, caller_waits=True)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = synchronize(grouped_allreduce_async([g.contiguous() for g in grad_outputs], op=ctx.op,
                                                    prescale_factor=ctx.prescale_factor,
                                                    postscale_factor=ctx.postscale_factor,
                                                    process_set=ctx.process_set))
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A function that performs averaging or summation of the input tensor
    list over all the Horovod processes. The input tensors are not modified.

    The reduction operations are keyed by the base name. If a base name is not
    provided, an incremented auto-generated base name is used. Reductions are
    performed across tensors in the same list position. The tensor type and
    shape must be the same on all Horovod processes for tensors sharing
    positions in the input tensor list. The reduction will not start until all
    processes are ready to send and receive the tensors.

    This acts as a thin wrapper around an autograd function.  If your input
    tensors require gradients, then calling this function will allow gradients
    to be computed and backpropagated.

    Arguments:
        tensors: A list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A base name to use for the group reduction operation.
        compression: Compression algorithm used during allreduce to reduce the amount
                     of data sent during the each parameter update step.  Defaults to
                     not using compression.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensors before allreduce.
        postscale_factor: Multiplicative factor to scale tensors after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A list containing tensors of the same shape and type as in `tensors`,
        averaged or summed across all processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                            *[c for c, _ in compressed])
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """A function that performs asynchronous in-place averaging or summation of the input
    tensors over all the Horovod processes.

    The reduction operations are keyed by the base name. If a base name is not
    provided, an incremented auto-generated base name is used. Reductions are
    performed across tensors in the same list position. The tensor type and
    shape must be the same on all Horovod processes for tensors sharing
    positions in the input tensor list. The reduction will not start until all
    processes are ready to send and receive the tensors.

    Arguments:
        tensors: A list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A base name to use for the group reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensors before allreduce.
        postscale_factor: Multiplicative factor to scale tensors after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the group allreduce operation that can be used with `poll()` or
        `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    return _allreduce_async(tensors, list(tensors), name, op, prescale_factor, postscale_factor, process_set,
                            "grouped_allreduce", False)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """A function that performs in-place averaging or summation of the input tensors over
    all the Horovod processes.

    The reduction operations are keyed by the base name. If a base name is not
    provided, an incremented auto-generated base name is used. Reductions are
    performed across tensors in the same list position. The tensor type and
    shape must be the same on all Horovod processes for tensors sharing
    positions in the input tensor list. The reduction will not start until all
    processes are ready to send and receive the tensors.

    Arguments:
        tensors: A list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A base name to use for the group reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults
            to Average if None is given.
        prescale_factor: Multiplicative factor to scale tensors before allreduce.
        postscale_factor: Multiplicative factor to scale tensors after allreduce.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A list containing tensors of the same shape and type as in `tensors`,
        averaged or summed across all processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    handle = _allreduce_async(tensors, list(tensors), name, op, prescale_factor, postscale_factor, process_set,
                              "grouped_allreduce", False, caller_waits=True)
    return synchronize(handle)


class _SparseAllreduceHandle:
    """What sparse_allreduce_async returns: calling it (or passing it to
    `synchronize()`) waits and returns the reduced sparse tensor."""

    def __init__(self, tensor, values_handle, indices_handle, op, process_set):
        self._tensor = tensor
        self._values_handle = values_handle
        self._indices_handle = indices_handle
        self._op = op
        self._process_set = process_set

    def poll(self):
        return _handles.poll(self._values_handle) and _handles.poll(self._indices_handle)

    def __call__(self):
        values = synchronize(self._values_handle)
        indices = synchronize(self._indices_handle)
        if self._op == Average:
            values = values / self._process_set.size()
        # Duplicate indices from different ranks stay in the sparse tensor and
        # add up on coalesce(), which is what makes the concatenation a sum.
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, self._tensor.size(),
                                       dtype=self._tensor.dtype, device=self._tensor.device)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """A function that performs asynchronous summation or averaging of a sparse tensor
    over all the Horovod processes by allgathering its values and indices.

    Arguments:
        tensor: A sparse COO tensor to reduce.
        name: A name of the reduction operation.
        op: The reduction operation, Average or Sum.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle that can be used with `synchronize()` (or called) to get the
        reduced sparse tensor.
    """
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async supports op=Average or op=Sum, got %r" % (op,))
    tensor = tensor.coalesce() if not tensor.is_coalesced() else tensor
    # Allgather concatenates along the first dimension, so the [ndim, nnz]
    # indices travel transposed.
    indices = tensor.indices().transpose(0, 1).contiguous()
    values = tensor.values().contiguous()
    indices_handle = allgather_async(indices, name="%s.indices" % name if name else None, process_set=process_set)
    values_handle = allgather_async(values, name="%s.values" % name if name else None, process_set=process_set)
    return _SparseAllreduceHandle(tensor, values_handle, indices_handle, op, process_set)


# ---------------------------------------------------------------------------
# allgather, alltoall, reducescatter: results sized by negotiation

def _owned_result_to_torch(c_handle, index, dtype, device):
    """Copies a core-allocated result into a new tensor and frees the original."""
    res = result(c_handle, index)
    managed = res.output.contents
    dl = managed.dl_tensor
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    out = torch.empty(shape, dtype=dtype)
    nbytes = out.numel() * out.element_size()
    if nbytes:
        ctypes.memmove(out.data_ptr(), dl.data, nbytes)
    managed.deleter(res.output)
    if device.type != "cpu":
        out = out.to(device)
    return out, res


def _gather_like_async(collective, collective_name, tensors, name, process_set, single, reduce_op=Sum,
                       prescale_factor=1.0, postscale_factor=1.0, splits=None, caller_waits=False):
    ps_id = _process_set_id(process_set)
    hosts = [_to_host(t) for t in tensors]
    inputs = [_describe(h) for h in hosts]
    kinds = [(t.dtype, t.device) for t in tensors]

    def finish(h):
        outs = [_owned_result_to_torch(h, i, *kinds[i]) for i in range(len(tensors))]
        if collective == c_api.ALLTOALL:
            res = outs[0][1]
            received = torch.tensor([res.received_splits[i] for i in range(res.num_received_splits)],
                                    dtype=torch.int32)
            return outs[0][0], received
        tensors_out = [o[0] for o in outs]
        return tensors_out[0] if single else tensors_out

    return _handles.submit(finish, [tensors, hosts], collective, inputs,
                           _tensor_names(collective_name, name, len(tensors)), ps_id, reduce_op=reduce_op,
                           prescale_factor=prescale_factor, postscale_factor=postscale_factor, splits=splits,
                           caller_waits=caller_waits)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """A function that asynchronously concatenates the input tensor with the same input
    tensor on all other Horovod processes. The input tensor is not modified.

    The concatenation is done on the first dimension, so the input tensors on the
    different processes must have the same rank and shape, except for the first
    dimension, which is allowed to be different.

    Arguments:
        tensor: A tensor to allgather.
        name: A name of the allgather operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the allgather operation that can be used with `poll()` or
        `synchronize()`.
    """
    return _gather_like_async(c_api.ALLGATHER, "allgather", [tensor], name, process_set, True)


def _allgather_now(tensor, name, process_set):
    return _handles_synchronize(_gather_like_async(c_api.ALLGATHER, "allgather", [tensor], name, process_set,
                                                   True, caller_waits=True))


def _allgather_grad(grad_output, dim0, process_set):
    # Every rank's output depends on this rank's rows, so their gradient is
    # the average over ranks of the incoming gradient, narrowed to our rows
    # (Horovod averages here).
    grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=process_set)
    dims = allgather(torch.tensor([dim0], dtype=torch.int64), process_set=process_set)
    offset = int(dims[:process_set.rank()].sum())
    return grad_reduced.narrow(0, offset, dim0)


class HorovodAllgather(torch.autograd.Function):
    """An autograd function that performs allgather on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return _allgather_now(tensor, name, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        return _allgather_grad(grad_output, ctx.dim, ctx.process_set), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """A function that concatenates the input tensor with the same input tensor on
    all other Horovod processes. The input tensor is not modified.

    The concatenation is done on the first dimension, so the input tensors on the
    different processes must have the same rank and shape, except for the first
    dimension, which is allowed to be different.

    This acts as a thin wrapper around an autograd function.  If your input
    tensor requires gradients, then callings this function will allow gradients
    to be computed and backpropagated.

    Arguments:
        tensor: A tensor to allgather.
        name: A name of the allgather operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A tensor of the same type as `tensor`, concatenated on dimension zero
        across all processes. The shape is identical to the input shape, except for
        the first dimension, which may be greater and is the sum of all first
        dimensions of the tensors in different Horovod processes.
    """
    if _compiling():
        return torch.ops.hvd.allgather(tensor, name or "", _process_set_id(process_set))
    if _needs_grad(tensor):
        return HorovodAllgather.apply(tensor, name, process_set)
    return _allgather_now(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """A function that asynchronously concatenates each input tensor with the corresponding
    input tensor on every other Horovod process for a list of input tensors. The input
    tensors are not modified.

    The concatenation is done on the first dimension, so the corresponding input tensors
    on the different processes must have the same rank and shape, except for the first
    dimension, which is allowed to be different.

    Arguments:
        tensors: A list of tensors to allgather.
        name: A base name to use for the group allgather operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the group allgather operation that can be used with `poll()` or
        `synchronize()`.
    """
    return _gather_like_async(c_api.ALLGATHER, "grouped_allgather", list(tensors), name, process_set, False)


class HorovodGroupedAllgather(torch.autograd.Function):
    """An autograd function that performs allgather on a list of tensors."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(_gather_like_async(c_api.ALLGATHER, "grouped_allgather", list(tensors), name,
                                                    process_set, False, caller_waits=True)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = [_allgather_grad(g, d, ctx.process_set) for g, d in zip(grad_outputs, ctx.dims)]
        return (None, None) + tuple(grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A function that concatenates each input tensor with the corresponding input tensor
    on every other Horovod process for a list of input tensors. The input tensors are not
    modified.

    The concatenation is done on the first dimension, so the corresponding input tensors
    on the different processes must have the same rank and shape, except for the first
    dimension, which is allowed to be different.

    Arguments:
        tensors: A list of tensors to allgather.
        name: A base name to use for the group allgather operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A list containing tensors of the same type as in `tensors`. Each tensor is
        concatenated on dimension zero across all processes. Its shape is identical to
        the corresponding input shape, except for the first dimension, which may be
        greater and is the sum of all first dimensions of the corresponding tensor in
        different Horovod processes.
    """
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---------------------------------------------------------------------------
# broadcast

def _broadcast_async(tensor, output, root_rank, name, process_set, caller_waits=False):
    ps_id = _process_set_id(process_set)
    host = _to_host(tensor)
    host_out = host if output is tensor else _to_host(output)

    def finish(_):
        if output is not host_out:
            output.copy_(host_out)
        return output

    return _handles.submit(finish, [tensor, output, host, host_out], c_api.BROADCAST, [_describe(host)],
                           [full_name("broadcast", name)], ps_id, outputs=[_describe(host_out)],
                           root_rank=root_rank, caller_waits=caller_waits)


def _broadcast_now(tensor, root_rank, name, process_set_id, output=None):
    """Synchronous broadcast into `output` (a new tensor when None)."""
    host = tensor if isinstance(tensor, torch.Tensor) and tensor.is_cpu else _to_host(tensor)
    desc = _describe(host)
    if output is tensor and host is tensor:
        host_out, out_desc = host, desc
    else:
        host_out = torch.empty_like(host)  # contiguous: `host` passed _describe
        out_desc = _describe_like(host_out, desc)
    _run_sync(c_api.BROADCAST, desc, out_desc, full_name("broadcast", name), process_set_id, root_rank=root_rank,
              keepalive=(host, host_out))
    if output is None:
        return host_out if host is tensor else host_out.to(tensor.device)
    if host_out is not output:
        output.copy_(host_out)
    return output


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """A function that asynchronously broadcasts the input tensor on root rank to the same
    input tensor on all other Horovod processes. The input tensor is not modified.

    The broadcast operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The broadcast will not start until all processes
    are ready to send and receive the tensor.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The rank to broadcast the value from.
        name: A name of the broadcast operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the broadcast operation that can be used with `poll()` or
        `synchronize()`.
    """
    output = torch.empty_like(tensor) if isinstance(tensor, torch.Tensor) else None
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def _broadcast_grad(grad_output, root_rank, process_set):
    # Only the root's input reaches the outputs; Horovod gives it the average
    # of the ranks' output gradients and every other rank zeros.
    grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=process_set)
    if rank() != root_rank:  # root_rank is a global rank, also on process sets
        grad_reduced = grad_reduced * 0
    return grad_reduced


class HorovodBroadcast(torch.autograd.Function):
    """An autograd function that broadcasts a tensor."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _broadcast_now(tensor, root_rank, name, _process_set_id(process_set))

    @staticmethod
    def backward(ctx, grad_output):
        return _broadcast_grad(grad_output, ctx.root_rank, ctx.process_set), None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A function that broadcasts the input tensor on root rank to the same input tensor
    on all other Horovod processes. The input tensor is not modified.

    The broadcast operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The broadcast will not start until all processes
    are ready to send and receive the tensor.

    This acts as a thin wrapper around an autograd function.  If your input
    tensor requires gradients, then callings this function will allow gradients
    to be computed and backpropagated.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The rank to broadcast the value from.
        name: A name of the broadcast operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A tensor of the same shape and type as `tensor`, with the value broadcasted
        from root rank.
    """
    if _compiling():
        return torch.ops.hvd.broadcast(tensor, root_rank, name or "", _process_set_id(process_set))
    if _needs_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return _broadcast_now(tensor, root_rank, name, _process_set_id(process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """A function that asynchronously broadcasts the input tensor on root rank to the same
    input tensor on all other Horovod processes. The operation is performed in-place.

    The broadcast operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The broadcast will not start until all processes
    are ready to send and receive the tensor.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The rank to broadcast the value from.
        name: A name of the broadcast operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the broadcast operation that can be used with `poll()` or
        `synchronize()`.
    """
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """A function that broadcasts the input tensor on root rank to the same input tensor
    on all other Horovod processes. The operation is performed in-place.

    The broadcast operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The broadcast will not start until all processes
    are ready to send and receive the tensor.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The rank to broadcast the value from.
        name: A name of the broadcast operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A tensor of the same shape and type as `tensor`, with the value broadcasted
        from root rank.
    """
    return _broadcast_now(tensor, root_rank, name, _process_set_id(process_set), output=tensor)


# ---------------------------------------------------------------------------
# alltoall

def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError("splits must be an integer tensor, got %s" % splits.dtype)
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """A function that scatters slices of the input tensor to all other Horovod processes
    and returns a tensor of gathered slices from all other Horovod processes. The input
    tensor is not modified.

    The slicing is done on the first dimension, so the input tensors on
    the different processes must have the same rank and shape, except for the
    first dimension, which is allowed to be different.

    Arguments:
        tensor: A tensor to distribute with alltoall.
        splits: A tensor of integers in rank order describing how many
                elements in `tensor` to send to each worker.  Splitting is
                applied along the first dimension of `tensor`. If `splits` is
                not provided, the first dimension is split equally by the
                number of Horovod processes.
        name: A name of the alltoall operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
        A handle to the alltoall operation that can be used with `poll()` or
        `synchronize()`; `synchronize()` returns the tuple (output, received_splits).
    """
    return _gather_like_async(c_api.ALLTOALL, "alltoall", [tensor], name, process_set, True,
                              splits=[_splits_list(splits)])


class HorovodAlltoall(torch.autograd.Function):
    """An autograd function that performs alltoall on a tensor."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        output, received_splits = _handles_synchronize(
            _gather_like_async(c_api.ALLTOALL, "alltoall", [tensor], name, process_set, True,
                               splits=[_splits_list(splits)], caller_waits=True))
        ctx.received_splits = received_splits
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, grad_received_splits):
        # The gradient travels back the way the rows came.
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received_splits, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """A function that scatters slices of the input tensor to all other Horovod processes
    and returns a tensor of gathered slices from all other Horovod processes. The input
    tensor is not modified.

    The slicing is done on the first dimension, so the input tensors on
    the different processes must have the same rank and shape, except for the
    first dimension, which is allowed to be different.

    This acts as a thin wrapper around an autograd function.  If your input
    tensor requires gradients, then callings this function will allow gradients
    to be computed and backpropagated.

    Arguments:
        tensor: A tensor to distribute with alltoall.
        splits: A tensor of integers in rank order describing how many
                elements in `tensor` to send to each worker.  Splitting is
                applied along the first dimension of `tensor`. If `splits` is
                not provided, the first dimension is split equally by the
                number of Horovod processes.
        name: A name of the alltoall operation.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.

    Returns:
      1) A tensor containing the gathered tensor data from all workers.
      2) If `splits` has been provided: A tensor of integers in rank order
         describing how many elements in the output tensor have been received
         from each worker.
    """
    output, received_splits = HorovodAlltoall.apply(tensor, splits, name, process_set)
    if splits is None:
        return output
    return output, received_splits


# ---------------------------------------------------------------------------
# reducescatter

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """A function that performs asynchronous reduction of the input tensor over all the
    Horovod processes, then scatters the results across all Horovod processes. The
    input tensor is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    The input tensors on the different processes must have the same rank and shape. The
    output tensor is identical in rank and shape to the input tensor, except for the
    first dimension, which will be divided across the different Horovod processes.

    Arguments:
        tensor: A tensor to average/sum and scatter.
        name: A name of the reduce_scatter operation.
        op: The reduction operation to combine tensors across different ranks.
            Can be Average (default) or Sum.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.
        prescale_factor: Multiplicative factor to scale tensor before reducescatter.
        postscale_factor: Multiplicative factor to scale tensor after reducescatter.

    Returns:
        A handle to the reduce_scatter operation that can be used with `poll()` or
        `synchronize()`.
    """
    return _gather_like_async(c_api.REDUCESCATTER, "reducescatter", [tensor], name, process_set, True,
                              reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def _reducescatter_grad(grad_output, op, prescale_factor, postscale_factor, process_set):
    # Gather the blocks' gradients back. The scale is Horovod's convention
    # (the same as the allreduce gradient's, kept so training scripts see the
    # gradient magnitudes they saw with Horovod): Sum multiplies by the set's
    # size, Average leaves the gathered gradient as it is; pre/postscale apply
    # as in the forward pass.
    grad = allgather(grad_output.contiguous(), process_set=process_set)
    scale = prescale_factor * postscale_factor
    if op == Sum:
        scale *= process_set.size()
    return grad * scale if scale != 1.0 else grad


class HorovodReducescatter(torch.autograd.Function):
    """An autograd function that performs reducescatter on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return _handles_synchronize(_gather_like_async(c_api.REDUCESCATTER, "reducescatter", [tensor], name,
                                                       process_set, True, reduce_op=op,
                                                       prescale_factor=prescale_factor,
                                                       postscale_factor=postscale_factor, caller_waits=True))

    @staticmethod
    def backward(ctx, grad_output):
        return (_reducescatter_grad(grad_output, ctx.op, ctx.prescale_factor, ctx.postscale_factor,
                                    ctx.process_set), None, None, None, None, None)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """A function that performs reduction of the input tensor over all the Horovod
    processes, then scatters the results across all Horovod processes. The input tensor
    is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all
    Horovod processes for a given name. The reduction will not start until all processes
    are ready to send and receive the tensor.

    This acts as a thin wrapper around an autograd function.  If your input
    tensor requires gradients, then callings this function will allow gradients
    to be computed and backpropagated.

    The input tensors on the different processes must have the same rank and shape. The
    output tensor is identical in rank and shape to the input tensor, except for the
    first dimension, which will be divided across the different Horovod processes.

    Arguments:
        tensor: A tensor to average/sum and scatter.
        name: A name of the reduce_scatter operation.
        compression: Compression algorithm used during reducescatter to reduce the amount
                     of data sent during the each parameter update step.  Defaults to
                     not using compression.
        op: The reduction operation to combine tensors across different ranks.
            Can be Average (default) or Sum.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.
        prescale_factor: Multiplicative factor to scale tensor before reducescatter.
        postscale_factor: Multiplicative factor to scale tensor after reducescatter.

    Returns:
        A tensor of the same rank and type as `tensor`, summed across all processes.
        The shape is identical to the input shape, except for the first dimension,
        which will be divided across the different Horovod processes.
    """
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(tensor_compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """A function that performs asynchronous reduction of a list of input tensors over all
    the Horovod processes, then scatters the results across all Horovod processes. The
    input tensors are not modified.

    The reduction operations are keyed by the base name. If a base name is not
    provided, an incremented auto-generated base name is used. Reductions are
    performed across tensors in the same list position. The tensor type and
    shape must be the same on all Horovod processes for tensors sharing
    positions in the input tensor list.

    Arguments:
        tensors: A list of tensors to average/sum and scatter.
        name: A base name to use for the group reduce_scatter operation.
        op: The reduction operation to combine tensors across different ranks.
            Can be Average (default) or Sum.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.
        prescale_factor: Multiplicative factor to scale tensors before reducescatter.
        postscale_factor: Multiplicative factor to scale tensors after reducescatter.

    Returns:
        A handle to the group reduce_scatter operation that can be used with `poll()` or
        `synchronize()`.
    """
    return _gather_like_async(c_api.REDUCESCATTER, "grouped_reducescatter", list(tensors), name, process_set,
                              False, reduce_op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """An autograd function that performs reducescatter on a list of tensors."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(synchronize(_gather_like_async(c_api.REDUCESCATTER, "grouped_reducescatter", list(tensors),
                                                    name, process_set, False, reduce_op=op,
                                                    prescale_factor=prescale_factor,
                                                    postscale_factor=postscale_factor, caller_waits=True)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = [_reducescatter_grad(g, ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set)
                 for g in grad_outputs]
        return (None, None, None, None, None) + tuple(grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """A function that performs reduction of a list of input tensors over all the Horovod
    processes, then scatters the results across all Horovod processes. The input tensors
    are not modified.

    The reduction operations are keyed by the base name. If a base name is not
    provided, an incremented auto-generated base name is used. Reductions are
    performed across tensors in the same list position. The tensor type and
    shape must be the same on all Horovod processes for tensors sharing
    positions in the input tensor list.

    Arguments:
        tensors: A list of tensors to average/sum and scatter.
        name: A base name to use for the group reduce_scatter operation.
        compression: Compression algorithm used during reducescatter to reduce the amount
                     of data sent during the each parameter update step.  Defaults to
                     not using compression.
        op: The reduction operation to combine tensors across different ranks.
            Can be Average (default) or Sum.
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.
        prescale_factor: Multiplicative factor to scale tensors before reducescatter.
        postscale_factor: Multiplicative factor to scale tensors after reducescatter.

    Returns:
        A list containing tensors of the same rank and type as in `tensors`. For each
        tensor the shape is identical to the input shape, except for the first
        dimension, which will be divided across the different Horovod processes.
    """
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                                *[c for c, _ in compressed])
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


# ---------------------------------------------------------------------------
# completion, join, barrier

def poll(handle):
    """Polls an allreduce, allgather, alltoall, broadcast, or reducescatter handle to
    determine whether underlying asynchronous operation has completed. After `poll()`
    returns `True`, `synchronize()` will return without blocking.

    Arguments:
        handle: A handle returned by an allreduce, allgather, alltoall, broadcast, or
                reducescatter asynchronous operation.

    Returns:
        A flag indicating whether the operation has completed.
    """
    if isinstance(handle, _SparseAllreduceHandle):
        return handle.poll()
    return _handles.poll(handle)


def _handles_synchronize(handle):
    try:
        return _handles.synchronize(handle)
    except _CoreMismatchError as e:
        _raise_torch_error(e)


def synchronize(handle):
    """Synchronizes an asynchronous allreduce, allgather, alltoall, broadcast, or
    reducescatter operation until it's completed. Returns the result of the operation.

    Arguments:
        handle: A handle returned by an allreduce, allgather, alltoall, broadcast, or
                reducescatter asynchronous operation.

    Returns:
        A single output tensor of the operation or a tuple of multiple output tensors.

    Raises:
        HorovodInternalError: the operation failed (a peer died, the job was shut
            down, or the ranks disagreed about the collective; the last case is
            a HorovodCollectiveMismatchError, which is a HorovodInternalError).
    """
    if isinstance(handle, _SparseAllreduceHandle):
        return handle()
    return _handles_synchronize(handle)


def join(device=-1):
    """A function that indicates that the rank finished processing data.

    All ranks that did not call join() continue to process allreduce operations.
    This function blocks Python thread until all ranks join.

    Arguments:
        device: An id of the device to create temprorary zero tensors (default -1, CPU)

    Returns:
        Id of the rank that joined last.
    """
    return _handles_synchronize(_handles.submit(lambda h: result(h, 0).last_joined_rank, [], c_api.JOIN, [], [b""],
                                                0, caller_waits=True))


def barrier(process_set=global_process_set):
    """A function that acts as a simple sychronization point for ranks specified
    in the given process group(default to global group). Ranks that reach
    this function call will stall until all other ranks have reached.

    Arguments:
        process_set: Process set object to limit this operation to a subset of
            Horovod processes. Default is the global process set.
    """
    _handles_synchronize(_handles.submit(lambda h: None, [], c_api.BARRIER, [], [b""], _process_set_id(process_set),
                                         caller_waits=True))


# Registers the hvd:: custom ops used inside torch.compile.
from horovod.torch import custom_ops as _custom_ops  # noqa: E402,F401
