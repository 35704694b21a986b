# mpi_ops.py - Horovod's collective API on torch tensors: allreduce,
# allgather, broadcast, alltoall, reducescatter (plain, in-place, async and
# grouped), their autograd functions, poll/synchronize, join and barrier.
# How a tensor reaches the engine and comes back (descriptors, staging,
# handles, the synchronous calls, error classes) is horovod.torch's
# _engine_bridge; this module decides which path a call takes (eager, autograd
# or, under torch.compile, the hvd:: ops that horovod.torch.custom_ops
# registers when the package is imported) and what its gradient is.
"""Collective operations on PyTorch tensors (``horovod.torch.mpi_ops``)."""

import torch

from horovod.common import _basics  # noqa: F401  (Horovod code imports mpi_ops._basics)
from horovod.common import c_api
from horovod.common.basics import Adasum, Average, HorovodBasics, Max, Min, Product, Sum  # noqa: F401
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                         remove_process_set)
from horovod.common.process_sets import process_set_id_of as _process_set_id
from horovod.common.util import get_average_backwards_compatibility_fun

from horovod.torch._engine_bridge import (HorovodCollectiveMismatchError, _allgather_now, _allreduce_async,
                                          _allreduce_now, _broadcast_async, _broadcast_now, _cached_allreduce,
                                          _gather_like_async, _handles, _handles_synchronize, _owned_result_now,
                                          _result_from_pool, _splits_device, _splits_list)
from horovod.torch.compression import Compression

# The bridge's internals were defined here before it had a module of its own;
# kept importable from here for code written against that layout.
from horovod.common.exceptions import HorovodInternalError  # noqa: F401,E402
from horovod.common.engine_calls import HandleManager, TensorDesc, full_name, result, run_sync  # noqa: F401,E402
from horovod.torch._engine_bridge import (_DLPACK_TYPES, _CoreMismatchError, _PyCapsule_New,  # noqa: F401,E402
                                          _check_one_device, _cuda_in_engine, _describe, _describe_like,
                                          _owned_result_to_torch, _raise_torch_error, _run_sync, _tensor_names,
                                          _to_host)

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

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts a reduction (average by default, or sum, min, ...) of `tensor` across all ranks without waiting.
    The result goes to a new tensor; `tensor` itself is left untouched.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    Arguments:
        tensor: the tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional name under which the ranks match this operation.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the
        reduced tensor.
    """
    op = handle_average_backwards_compatibility(op, average)
    if _result_from_pool(tensor):
        return _gather_like_async(c_api.ALLREDUCE, "allreduce", [tensor], name, process_set, True, op,
                                  prescale_factor, postscale_factor)
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
    """Autograd function behind `allreduce()` for inputs that require gradients."""

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
    """Reduces `tensor` across all ranks (average by default, or sum, min, ...) and returns the result
    as a new tensor; `tensor` itself is left untouched.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    When `tensor` requires gradients the call goes through an autograd function, so the result is part
    of the graph and gradients flow back through the reduction.

    Arguments:
        tensor: the tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional name under which the ranks match this operation.
        compression: a compressor (see `horovod.torch.Compression`) applied to the tensor before
            it is sent and undone on the result, to cut the bytes exchanged. Compression.none
            (no compression) by default.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A new tensor with the shape and dtype of `tensor`, holding the reduction over
        the ranks.
    """
    if average is None and compression is Compression.none and not _compiling():
        # A repeated small call, the latency-bound case: one C call finds and
        # runs it (gradients and anything else unusual come back as None).
        reduced = _cached_allreduce(tensor, False, name, Average if op is None else op, prescale_factor,
                                    postscale_factor, 0 if process_set is global_process_set else
                                    _process_set_id(process_set))
        if reduced is not None:
            return reduced
    op = handle_average_backwards_compatibility(op, average)
    # Compression.none's calls do nothing, and a small allreduce is bound by its overheads.
    uncompressed = compression is Compression.none
    tensor_compressed, ctx = (tensor, None) if uncompressed else compression.compress(tensor)
    if _compiling():
        reduced = torch.ops.hvd.allreduce(tensor_compressed, op, name or "", float(prescale_factor),
                                          float(postscale_factor), _process_set_id(process_set))
    elif _needs_grad(tensor_compressed):
        reduced = HorovodAllreduce.apply(tensor_compressed, name, op, prescale_factor, postscale_factor,
                                         process_set)
    else:
        reduced = _allreduce_now(tensor_compressed, op, name, prescale_factor, postscale_factor,
                                 _process_set_id(process_set))
    return reduced if uncompressed else compression.decompress(reduced, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place reduction (average by default, or sum, min, ...) of `tensor` across all ranks
    without waiting; once synchronized, `tensor` holds the result.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    Arguments:
        tensor: the tensor to reduce; it is overwritten with the result.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional name under which the ranks match this operation.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns
        `tensor`, now reduced.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = [tensor]  # the same list as outputs: in place
    return _allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce", True)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` across all ranks in place (average by default, or sum, min, ...).

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    Arguments:
        tensor: the tensor to reduce; it is overwritten with the result.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional name under which the ranks match this operation.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        `tensor` itself, now holding the reduction over the ranks.
    """
    op = handle_average_backwards_compatibility(op, average)
    process_set_id = _process_set_id(process_set)
    if not _compiling() and _cached_allreduce(tensor, True, name, op, prescale_factor, postscale_factor,
                                              process_set_id) is not None:
        return tensor
    return _allreduce_now(tensor, op, name, prescale_factor, postscale_factor, process_set_id, output=tensor)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts a reduction (average by default, or sum, min, ...) of a list of tensors across all ranks
    without waiting, as one group. The results go to new tensors; the inputs are left untouched.

    Each list entry is reduced with the entry at the same position on the other ranks, and those must
    agree in dtype and shape. `name` is the base from which the entries' names are derived (a
    counter-based one is generated when it is omitted); the exchange begins once every rank has
    submitted the whole group.

    Arguments:
        tensors: the list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional base name under which the ranks match this group.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the list
        of reduced tensors.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    outputs = [torch.empty_like(t) if isinstance(t, torch.Tensor) else None for t in tensors]
    return _allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set,
                            "grouped_allreduce", False)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Autograd function behind `grouped_allreduce()`: reduces a list of tensors as one group."""

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
    """Reduces a list of tensors across all ranks as one group (average by default, or sum, min, ...)
    and returns the results as new tensors; the inputs are left untouched.

    Each list entry is reduced with the entry at the same position on the other ranks, and those must
    agree in dtype and shape. `name` is the base from which the entries' names are derived (a
    counter-based one is generated when it is omitted); the exchange begins once every rank has
    submitted the whole group.

    The call goes through an autograd function, so for inputs that require gradients the results are
    part of the graph and gradients flow back through the reduction.

    Arguments:
        tensors: the list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional base name under which the ranks match this group.
        compression: a compressor (see `horovod.torch.Compression`) applied to each tensor before
            it is sent and undone on its result, to cut the bytes exchanged. Compression.none
            (no compression) by default.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A list of new tensors, one per input and with its shape and dtype, holding the
        reductions over the ranks.
    """
    op = handle_average_backwards_compatibility(op, average)
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                            *[c for c, _ in compressed])
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place reduction (average by default, or sum, min, ...) of a list of tensors across
    all ranks without waiting, as one group; once synchronized, each tensor holds its result.

    Each list entry is reduced with the entry at the same position on the other ranks, and those must
    agree in dtype and shape. `name` is the base from which the entries' names are derived (a
    counter-based one is generated when it is omitted); the exchange begins once every rank has
    submitted the whole group.

    Arguments:
        tensors: the list of tensors to reduce; each is overwritten with its result.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional base name under which the ranks match this group.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the list
        of input tensors, now reduced.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    return _allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set,
                            "grouped_allreduce", False)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces a list of tensors across all ranks in place, as one group (average by default, or sum,
    min, ...).

    Each list entry is reduced with the entry at the same position on the other ranks, and those must
    agree in dtype and shape. `name` is the base from which the entries' names are derived (a
    counter-based one is generated when it is omitted); the exchange begins once every rank has
    submitted the whole group.

    Arguments:
        tensors: the list of tensors to reduce; each is overwritten with its result.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Superseded by `op`; slated for removal in v1.0.

        name: optional base name under which the ranks match this group.
        op: how the ranks' tensors are combined (Average, Sum, Min, Max, Product, Adasum).
            None means Average.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        The list of input tensors, now holding the reductions over the ranks.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    handle = _allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set,
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
    """Starts a sum or average of a sparse COO tensor across all ranks without waiting; the values and
    indices of every rank are allgathered and combined into one sparse tensor.

    Arguments:
        tensor: the sparse COO tensor to reduce.
        name: optional name from which the names of the two allgathers are derived.
        op: Average or Sum; any other operation raises ValueError.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle; passing it to `synchronize()` (or calling it) waits and returns the
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

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts gathering `tensor` from all ranks without waiting; the result is the ranks' tensors
    stacked along the first dimension, in rank order. `tensor` itself is left untouched.

    The ranks' tensors may differ in their first dimension only: the number of dimensions and the
    remaining sizes must match.

    Arguments:
        tensor: the tensor to gather.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the
        gathered tensor.
    """
    return _gather_like_async(c_api.ALLGATHER, "allgather", [tensor], name, process_set, True)


def _allgather_grad(grad_output, dim0, process_set):
    # Every rank's output depends on this rank's rows, so their gradient is
    # the average over ranks of the incoming gradient, narrowed to our rows
    # (Horovod averages here).
    grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=process_set)
    dims = allgather(torch.tensor([dim0], dtype=torch.int64), process_set=process_set)
    offset = int(dims[:process_set.rank()].sum())
    return grad_reduced.narrow(0, offset, dim0)


class HorovodAllgather(torch.autograd.Function):
    """Autograd function behind `allgather()` for inputs that require gradients."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return _allgather_now(tensor, name, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        return _allgather_grad(grad_output, ctx.dim, ctx.process_set), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Gathers `tensor` from all ranks and returns the ranks' tensors stacked along the first dimension,
    in rank order, as a new tensor. `tensor` itself is left untouched.

    The ranks' tensors may differ in their first dimension only: the number of dimensions and the
    remaining sizes must match.

    When `tensor` requires gradients the call goes through an autograd function, so the result is part
    of the graph and gradients flow back through the gather.

    Arguments:
        tensor: the tensor to gather.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A tensor of `tensor`'s dtype whose first dimension is the sum of the ranks' first
        dimensions; the other dimensions are those of `tensor`.
    """
    if _compiling():
        return torch.ops.hvd.allgather(tensor, name or "", _process_set_id(process_set))
    if _needs_grad(tensor):
        return HorovodAllgather.apply(tensor, name, process_set)
    return _allgather_now(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts gathering a list of tensors from all ranks without waiting, as one group: each entry is
    stacked along the first dimension with the entries at the same position on the other ranks. The
    inputs are left untouched.

    Entries at the same position may differ in their first dimension only: the number of dimensions
    and the remaining sizes must match.

    Arguments:
        tensors: the list of tensors to gather.
        name: optional base name under which the ranks match this group.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the list
        of gathered tensors.
    """
    return _gather_like_async(c_api.ALLGATHER, "grouped_allgather", list(tensors), name, process_set, False)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Autograd function behind `grouped_allgather()`: gathers a list of tensors as one group."""

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
    """Gathers a list of tensors from all ranks as one group: each entry is stacked along the first
    dimension, in rank order, with the entries at the same position on the other ranks. The inputs
    are left untouched.

    Entries at the same position may differ in their first dimension only: the number of dimensions
    and the remaining sizes must match.

    Arguments:
        tensors: the list of tensors to gather.
        name: optional base name under which the ranks match this group.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A list with one new tensor per input, of the input's dtype; its first dimension is
        the sum of the matching entries' first dimensions over the ranks, and its other
        dimensions are the input's.
    """
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---------------------------------------------------------------------------
# broadcast

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying `tensor` from `root_rank` to all ranks without waiting; the result goes to a new
    tensor and `tensor` itself is left untouched.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    Arguments:
        tensor: the tensor to broadcast (its value matters on the root only).
        root_rank: the rank whose tensor is sent to the others.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the
        broadcast tensor.
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
    """Autograd function behind `broadcast()` for inputs that require gradients."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _broadcast_now(tensor, root_rank, name, _process_set_id(process_set))

    @staticmethod
    def backward(ctx, grad_output):
        return _broadcast_grad(grad_output, ctx.root_rank, ctx.process_set), None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies `tensor` from `root_rank` to all ranks and returns the root's value as a new tensor;
    `tensor` itself is left untouched.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    When `tensor` requires gradients the call goes through an autograd function, so the result is part
    of the graph and gradients flow back to the root's input.

    Arguments:
        tensor: the tensor to broadcast (its value matters on the root only).
        root_rank: the rank whose tensor is sent to the others.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A new tensor with the shape and dtype of `tensor`, holding the root rank's value.
    """
    if _compiling():
        return torch.ops.hvd.broadcast(tensor, root_rank, name or "", _process_set_id(process_set))
    if _needs_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return _broadcast_now(tensor, root_rank, name, _process_set_id(process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying `tensor` from `root_rank` into the same tensor on all other ranks, in place and
    without waiting.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    Arguments:
        tensor: the tensor to broadcast; on the other ranks it is overwritten with the root's value.
        root_rank: the rank whose tensor is sent to the others.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns `tensor`.
    """
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies `tensor` from `root_rank` into the same tensor on all other ranks, in place.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    Arguments:
        tensor: the tensor to broadcast; on the other ranks it is overwritten with the root's value.
        root_rank: the rank whose tensor is sent to the others.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        `tensor` itself, now holding the root rank's value.
    """
    return _broadcast_now(tensor, root_rank, name, _process_set_id(process_set), output=tensor)


# ---------------------------------------------------------------------------
# alltoall

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an all-to-all exchange without waiting: `tensor` is cut into consecutive blocks of rows,
    block i goes to rank i, and the blocks every rank sent here are joined in rank order. `tensor`
    itself is left untouched.

    Blocks are cut along the first dimension, so the ranks' tensors may differ in that dimension
    only: the number of dimensions and the remaining sizes must match.

    Arguments:
        tensor: the tensor whose rows are distributed.
        splits: optional integer tensor (or sequence), in rank order, giving how many rows of
            `tensor` go to each rank. Without it the first dimension is divided evenly among
            the ranks of the process set.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the tuple
        (output, received_splits).
    """
    return _gather_like_async(c_api.ALLTOALL, "alltoall", [tensor], name, process_set, True,
                              splits=[_splits_list(splits)], splits_device=_splits_device(splits))


class HorovodAlltoall(torch.autograd.Function):
    """Autograd function behind `alltoall()`; its backward pass sends the gradient rows back where
    they came from.
    """

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        output, received_splits = _handles_synchronize(
            _gather_like_async(c_api.ALLTOALL, "alltoall", [tensor], name, process_set, True,
                               splits=[_splits_list(splits)], caller_waits=True,
                               splits_device=_splits_device(splits)))
        ctx.received_splits = received_splits
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, grad_received_splits):
        # The gradient travels back the way the rows came.
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received_splits, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """All-to-all exchange: `tensor` is cut into consecutive blocks of rows, block i goes to rank i, and
    the blocks every rank sent here are joined in rank order. `tensor` itself is left untouched.

    Blocks are cut along the first dimension, so the ranks' tensors may differ in that dimension
    only: the number of dimensions and the remaining sizes must match.

    The call goes through an autograd function, so for inputs that require gradients the result is
    part of the graph and gradients flow back through the exchange.

    Arguments:
        tensor: the tensor whose rows are distributed.
        splits: optional integer tensor (or sequence), in rank order, giving how many rows of
            `tensor` go to each rank. Without it the first dimension is divided evenly among
            the ranks of the process set.
        name: optional name under which the ranks match this operation.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        Without `splits`: the tensor of received rows. With `splits`: the tuple
        (output, received_splits), where received_splits is an integer tensor, in rank
        order, of how many rows of the output came from each rank.
    """
    output, received_splits = HorovodAlltoall.apply(tensor, splits, name, process_set)
    if splits is None:
        return output
    return output, received_splits


# ---------------------------------------------------------------------------
# reducescatter

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reduce-scatter without waiting: the ranks' tensors are reduced (averaged by default, or
    summed) and each rank receives its own block of rows of the result. `tensor` itself is left
    untouched.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    The result has the rank and trailing dimensions of `tensor`; its first dimension is this rank's
    share of the input's first dimension.

    Arguments:
        tensor: the tensor to reduce and scatter.
        name: optional name under which the ranks match this operation.
        op: how the ranks' tensors are combined: Average (the default) or Sum.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced block is multiplied by this afterwards.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns this
        rank's block of the reduced tensor.
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
    """Autograd function behind `reducescatter()`; its backward pass allgathers the blocks' gradients."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return _owned_result_now(c_api.REDUCESCATTER, "reducescatter", tensor, name, process_set, op,
                                 prescale_factor, postscale_factor)

    @staticmethod
    def backward(ctx, grad_output):
        return (_reducescatter_grad(grad_output, ctx.op, ctx.prescale_factor, ctx.postscale_factor,
                                    ctx.process_set), None, None, None, None, None)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatter: the ranks' tensors are reduced (averaged by default, or summed) and each rank
    gets back its own block of rows of the result. `tensor` itself is left untouched.

    Ranks pair up operations by `name`: each rank has to submit a tensor of identical dtype and shape
    under the same name, and no data moves before every rank has submitted it. Without a `name`, the
    engine generates one from a running counter.

    For inputs that require gradients the call goes through an autograd function, so the result is
    part of the graph and gradients flow back through the operation.

    The result has the rank and trailing dimensions of `tensor`; its first dimension is this rank's
    share of the input's first dimension.

    Arguments:
        tensor: the tensor to reduce and scatter.
        name: optional name under which the ranks match this operation.
        compression: a compressor (see `horovod.torch.Compression`) applied to the tensor before
            it is sent and undone on the result, to cut the bytes exchanged. Compression.none
            (no compression) by default.
        op: how the ranks' tensors are combined: Average (the default) or Sum.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced block is multiplied by this afterwards.

    Returns:
        A tensor of `tensor`'s dtype and number of dimensions holding this rank's block of
        the reduction (an average with the default op, a sum with op=Sum); only its first
        dimension differs from the input's.
    """
    if compression is Compression.none and not _needs_grad(tensor):
        return _owned_result_now(c_api.REDUCESCATTER, "reducescatter", tensor, name, process_set, op,
                                 prescale_factor, postscale_factor)
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(tensor_compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter of a list of tensors without waiting, as one group: each entry is reduced
    (averaged by default, or summed) with the entries at the same position on the other ranks, and
    each rank receives its own block of rows of every result. The inputs are left untouched.

    Entries at the same position must agree in dtype and shape across the ranks. `name` is the base
    from which the entries' names are derived (a counter-based one is generated when it is omitted).

    Arguments:
        tensors: the list of tensors to reduce and scatter.
        name: optional base name under which the ranks match this group.
        op: how the ranks' tensors are combined: Average (the default) or Sum.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced block is multiplied by this afterwards.

    Returns:
        A handle to pass to `poll()` or `synchronize()`; `synchronize()` returns the list
        of this rank's blocks.
    """
    return _gather_like_async(c_api.REDUCESCATTER, "grouped_reducescatter", list(tensors), name, process_set,
                              False, reduce_op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Autograd function behind `grouped_reducescatter()`: reduce-scatters a list of tensors as one group."""

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
    """Reduce-scatter of a list of tensors as one group: each entry is reduced (averaged by default, or
    summed) with the entries at the same position on the other ranks, and each rank gets back its
    own block of rows of every result. The inputs are left untouched.

    Entries at the same position must agree in dtype and shape across the ranks. `name` is the base
    from which the entries' names are derived (a counter-based one is generated when it is omitted).

    Arguments:
        tensors: the list of tensors to reduce and scatter.
        name: optional base name under which the ranks match this group.
        compression: a compressor (see `horovod.torch.Compression`) applied to each tensor before
            it is sent and undone on its result, to cut the bytes exchanged. Compression.none
            (no compression) by default.
        op: how the ranks' tensors are combined: Average (the default) or Sum.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        prescale_factor: every input is multiplied by this before the reduction.
        postscale_factor: every reduced block is multiplied by this afterwards.

    Returns:
        A list with one tensor per input, of the input's dtype and number of dimensions,
        holding this rank's block of the reduction; only the first dimension differs from
        the input's.
    """
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                                *[c for c, _ in compressed])
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


# ---------------------------------------------------------------------------
# completion, join, barrier

def poll(handle):
    """Tells whether the asynchronous operation behind `handle` has finished, without blocking.
    Once it returns True, `synchronize(handle)` returns at once.

    Arguments:
        handle: a handle from one of the `*_async` functions (allreduce, allgather, alltoall,
            broadcast, reducescatter or their grouped forms).

    Returns:
        True when the operation is done, False while it is still in progress.
    """
    if isinstance(handle, _SparseAllreduceHandle):
        return handle.poll()
    return _handles.poll(handle)


def synchronize(handle):
    """Waits for the asynchronous operation behind `handle` to finish and returns its result.

    Arguments:
        handle: a handle from one of the `*_async` functions (allreduce, allgather, alltoall,
            broadcast, reducescatter or their grouped forms).

    Returns:
        The operation's output: one tensor, or a list or tuple of tensors for grouped
        operations and alltoall.

    Raises:
        HorovodInternalError: the operation failed (a peer died, the job was shut
            down, or the ranks disagreed about the collective; the last case is
            a HorovodCollectiveMismatchError, which is a HorovodInternalError).
    """
    if isinstance(handle, _SparseAllreduceHandle):
        return handle()
    return _handles_synchronize(handle)


def join(device=-1):
    """Declares that this rank has run out of data and blocks until every rank has done the same.

    While some ranks have joined, the others can keep running allreduces: each joined rank stands
    in with zeros. The call returns once all ranks have called join().

    Arguments:
        device: accepted for compatibility with Horovod, where it chose the device of the zero
            tensors a joined rank contributes (default -1, the CPU); hvd ignores it.

    Returns:
        The rank that was the last to join.
    """
    return _handles_synchronize(_handles.submit_join())


def barrier(process_set=global_process_set):
    """Blocks until every rank of `process_set` has reached this call.

    Arguments:
        process_set: the ProcessSet whose ranks wait for one another; the global process set
            (all ranks) unless given.
    """
    _handles_synchronize(_handles.submit_barrier(_process_set_id(process_set)))

