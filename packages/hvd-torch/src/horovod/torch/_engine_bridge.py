# _engine_bridge.py - where torch tensors meet hvd-core's C ABI: tensor
# descriptors (dtypes, CPU and CUDA devices, torch's stream), host staging
# when the engine cannot move a CUDA tensor itself, results the core sized
# and owns turned back into tensors (copied, or taken over through DLPack),
# the handles of in-flight operations, the synchronous calls behind the
# eager fast paths, and the re-raising of the core's mismatch error as the
# class torch users catch. horovod.torch.mpi_ops (the public collectives)
# and horovod.torch.custom_ops (the torch.compile ops) are built on it.
"""The torch <-> hvd-core bridge behind horovod.torch's collectives."""

import ctypes
import functools
import threading

import torch
import torch.utils.dlpack

from horovod.common import _basics
from horovod.common import c_api
from horovod.common.basics import Sum
from horovod.common.exceptions import HorovodCollectiveMismatchError as _CoreMismatchError
from horovod.common.exceptions import HorovodInternalError
from horovod.common.engine_calls import (COPIED_RESULT_BYTES, ENGINE_ALLOCATED_ALLREDUCE_BYTES, async_table,
                                         call_sync_addresses, remember_async_block, remember_block, run_cached_block,
                                         sync_template, take_torch_tensors, thread_sync)
from horovod.common.engine_calls import (HandleManager, PackedGroup, TensorDesc, adopt_owned_result, full_name,
                                         group_tensor_names, owned_address, received_splits, result, run_sync,
                                         run_sync_owned)
from horovod.common.process_sets import process_set_id_of as _process_set_id


class HorovodCollectiveMismatchError(HorovodInternalError, _CoreMismatchError):
    """The ranks disagree about a collective (shape, dtype, operation, root rank,
    scale factors or process set for the same tensor name).

    Horovod's torch binding reports every failed collective as
    ``HorovodInternalError``; this class is one, so existing ``except`` clauses
    keep working, and it is also hvd-core's ``HorovodCollectiveMismatchError``
    for code that wants to tell a mismatch (the engine stays usable) from a
    failed peer. Raised on every rank that took part.
    """


# Shown where the public API lives (tracebacks, repr, pickles), as before the split.
HorovodCollectiveMismatchError.__module__ = "horovod.torch.mpi_ops"


def _raise_torch_error(error):
    """Re-raises a core mismatch error as the class Horovod's torch users catch."""
    if isinstance(error, _CoreMismatchError) and not isinstance(error, HorovodCollectiveMismatchError):
        raise HorovodCollectiveMismatchError(str(error)) from None
    raise error


def raising_torch_errors(call):
    """`call`, raising the core's mismatch error as torch's HorovodCollectiveMismatchError.

    Every way a torch collective waits for the engine goes through a function
    wrapped here, so the translation happens in one place.
    """
    @functools.wraps(call)
    def wrapper(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except _CoreMismatchError as e:
            _raise_torch_error(e)

    return wrapper


_handles = HandleManager()
_basics.add_shutdown_callback(_handles.clear)

_run_sync = raising_torch_errors(run_sync)
_run_sync_owned = raising_torch_errors(run_sync_owned)
_handles_synchronize = raising_torch_errors(_handles.synchronize)

# torch dtype -> DLPack (type code, bits)
_DLPACK_TYPES = {
    torch.uint8: (c_api.kDLUInt, 8), torch.int8: (c_api.kDLInt, 8), torch.int16: (c_api.kDLInt, 16),
    torch.int32: (c_api.kDLInt, 32), torch.int64: (c_api.kDLInt, 64),
    torch.float16: (c_api.kDLFloat, 16), torch.bfloat16: (c_api.kDLBfloat, 16),
    torch.float32: (c_api.kDLFloat, 32), torch.float64: (c_api.kDLFloat, 64), torch.bool: (c_api.kDLBool, 8),
}


def _describe(tensor):
    """The TensorDesc of a CPU tensor, or of a CUDA tensor the engine moves
    itself, after Horovod's input checks."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("Expected a torch.Tensor, got %s" % type(tensor).__name__)
    code_bits = _DLPACK_TYPES.get(tensor.dtype)
    if code_bits is None:
        raise ValueError("Tensor type %s is not supported." % tensor.dtype)
    if tensor.is_sparse:
        raise ValueError("Sparse tensors are not supported here; use sparse_allreduce_async.")
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    if tensor.is_cuda:
        # The engine's stream waits for the work torch has queued on the
        # current stream so far (the producer of this tensor), never the host.
        return TensorDesc(tensor.data_ptr(), tensor.shape, *code_bits, device_type=c_api.kDLCUDA,
                          device_id=tensor.device.index, stream=torch.cuda.current_stream(tensor.device).cuda_stream)
    return TensorDesc(tensor.data_ptr(), tensor.shape, *code_bits)


def _describe_like(tensor, desc):
    """The TensorDesc of `tensor`, made by the caller like `desc` (shape, dtype, device)."""
    return TensorDesc(tensor.data_ptr(), desc.shape, desc.code, desc.bits, desc.device_type, desc.device_id,
                      desc.stream)


_engine_moves_cuda = None


def _cuda_in_engine():
    """Whether hvd-core moves CUDA tensors itself (its CUDA plugin found a GPU)."""
    global _engine_moves_cuda
    if _engine_moves_cuda is None:
        _engine_moves_cuda = c_api.gpu_info()["cuda_available"]
    return _engine_moves_cuda


def _to_host(tensor):
    """The tensor the engine reads: `tensor` itself on the CPU, and CUDA tensors
    themselves where hvd-core moves them on the GPU (NCCL); otherwise a host
    copy of a device tensor (an hvd-core without its CUDA plugin)."""
    if not isinstance(tensor, torch.Tensor) or tensor.is_cpu:
        return tensor
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    if tensor.is_cuda and _cuda_in_engine():
        return tensor
    if tensor.is_cuda:
        # Page-locked memory from torch's caching host allocator: copies at
        # full bus speed, and the buffer is reused by later calls.
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor.detach())
        return host
    return tensor.detach().to("cpu")


# The naming rule of grouped tensors is hvd-core's, shared with every binding.
_tensor_names = group_tensor_names


def _check_one_device(tensors):
    """A group's tensors must share a device; Horovod raises RuntimeError otherwise."""
    if len(tensors) < 2:
        return
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devices) > 1:
        raise RuntimeError("A grouped collective needs all its tensors on one device; got %s."
                           % ", ".join(sorted(str(d) for d in devices)))


# ---------------------------------------------------------------------------
# allreduce and broadcast: the caller allocates the output

def _allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set, collective,
                     single, caller_waits=False):
    """Enqueues an allreduce of `tensors` into `outputs` (which may be the tensors
    themselves; `outputs is tensors` for a group or single tensor in place);
    synchronize() returns outputs[0] when `single`, else the list."""
    if outputs is tensors:
        handle = _in_place_group_async(tensors, name, op, prescale_factor, postscale_factor, process_set, collective,
                                       single, caller_waits)
        if handle is not None:
            return handle
    _check_one_device(tensors)
    ps_id = _process_set_id(process_set)
    hosts = [_to_host(t) for t in tensors]
    # A staged input is a private copy: reduce into it, then copy to the output.
    host_outs = [h if o is t or h is not t else _to_host(o) for t, o, h in zip(tensors, outputs, hosts)]
    inputs = [_describe(h) for h in hosts]
    # In place (the optimizer's gradients): the input's description is the output's.
    outs = [d if o is h else _describe(o) for d, h, o in zip(inputs, hosts, host_outs)]

    def finish(_):
        for out, host_out in zip(outputs, host_outs):
            if out is not host_out:  # staged device tensor: bring the result back
                out.copy_(host_out)
        return outputs[0] if single else list(outputs)

    return _handles.submit(finish, [tensors, outputs, hosts, host_outs], c_api.ALLREDUCE, inputs,
                           _tensor_names(collective, name, len(tensors)), ps_id, outputs=outs, reduce_op=op,
                           prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                           caller_waits=caller_waits)


_STRIDED = torch.strided


def _plain_cpu(tensor):
    """Whether `tensor` is a plain contiguous CPU tensor (no subclass): its memory can go to the engine as is."""
    return type(tensor) is torch.Tensor and tensor.is_cpu and tensor.layout is _STRIDED and tensor.is_contiguous()


class _InPlaceGroup:
    """The PackedGroup of an in-place group of plain CPU tensors, and the
    shapes and dtypes that a later call's tensors must have to use it."""

    __slots__ = ("packed", "shapes", "dtypes")

    def __init__(self, tensors, name, op, prescale_factor, postscale_factor, ps_id, collective, caller_waits):
        self.shapes = [t.shape for t in tensors]
        self.dtypes = [t.dtype for t in tensors]
        self.packed = PackedGroup(c_api.ALLREDUCE, [_describe(t) for t in tensors],
                                  _tensor_names(collective, name, len(tensors)), ps_id, op, prescale_factor,
                                  postscale_factor, caller_waits)

    def addresses(self, tensors):
        """The tensors' data addresses, or None unless each is a plain CPU
        tensor of its member's shape and dtype."""
        out = []
        for t, shape, dtype in zip(tensors, self.shapes, self.dtypes):
            if not _plain_cpu(t) or t.dtype is not dtype or t.shape != shape:
                return None
            out.append(t.data_ptr())
        return out


# Per thread, as engine_calls' blocks are: a block's addresses are written
# and then enqueued, and another thread must not write in between.
_in_place_groups = threading.local()
_MAX_IN_PLACE_GROUPS = 1024


def _in_place_group_async(tensors, name, op, prescale_factor, postscale_factor, process_set, collective, single,
                          caller_waits):
    """_allreduce_async in place, for plain CPU tensors (the optimizer's
    gradient buckets or single gradients, grouped_allreduce_async_,
    allreduce_async_): the argument block is made on the first call, and later
    calls with tensors of the same shapes and dtypes only write their
    addresses into it. None, having done nothing, for any other tensors."""
    ps_id = _process_set_id(process_set)
    table = async_table() if single and collective == "allreduce" else None
    if table is not None:
        handle = _single_async_cached(table, tensors, name, op, prescale_factor, postscale_factor, ps_id,
                                      caller_waits)
        if handle is not None:
            return handle
    cache = getattr(_in_place_groups, "cache", None)
    if cache is None:
        cache = _in_place_groups.cache = {}
    key = (collective, name, len(tensors), op, prescale_factor, postscale_factor, ps_id, caller_waits)
    if single:  # one name, or none, may come with tensors of several shapes in turn
        key += (tensors[0].shape, tensors[0].dtype)
    group = cache.get(key)
    addresses = None if group is None else group.addresses(tensors)
    if addresses is None:
        if not tensors or not all(_plain_cpu(t) and t.dtype in _DLPACK_TYPES for t in tensors):
            return None
        if len(cache) >= _MAX_IN_PLACE_GROUPS:
            cache.clear()
        group = cache[key] = _InPlaceGroup(tensors, name, op, prescale_factor, postscale_factor, ps_id, collective,
                                           caller_waits)
        addresses = group.addresses(tensors)
        if table is not None:
            _take_torch_tensors()
            remember_async_block(table, group.packed, tensors[0], name, op, prescale_factor, postscale_factor, ps_id,
                                 caller_waits)
    group.packed.set_addresses(addresses)
    return _handles.submit_packed((lambda _: tensors[0]) if single else (lambda _: list(tensors)), [tensors],
                                  group.packed)


# (process set id, name) -> the names an allreduce_async_ under that name
# reserves until synchronized (see HandleManager.submit), for _single_async_cached.
_reserved_names = {}


def _single_async_cached(table, tensors, name, op, prescale_factor, postscale_factor, ps_id, caller_waits):
    """_in_place_group_async of one tensor through the C accelerator, which
    finds the block a first call left in this thread's table and enqueues
    it (HandleManager.submit_cached); None, having done nothing, for a call
    it does not take."""
    reserved = ()
    if name:
        reserved = _reserved_names.get((ps_id, name))
        if reserved is None:
            if len(_reserved_names) >= _MAX_IN_PLACE_GROUPS:
                _reserved_names.clear()
            reserved = _reserved_names[(ps_id, name)] = ((ps_id, full_name("allreduce", name)),)
    tensor = tensors[0]
    return _handles.submit_cached(lambda _: tensor, tensors, reserved,
                                  (table, _ALLREDUCE, tensor, True, name, op, 0, prescale_factor, postscale_factor,
                                   ps_id, 2 if caller_waits else 1))


_ALLREDUCE_KEY = "torch.allreduce"  # keeps this module's keys apart from other users of thread_sync().blocks
_MAX_SYNC_BLOCKS = 4096
_ALLREDUCE = c_api.ALLREDUCE


def _result_from_pool(tensor):
    """Whether an out-of-place allreduce of `tensor` should let the engine
    allocate its result (from the pool of reused blocks; see
    horovod.common.engine_calls.ENGINE_ALLOCATED_ALLREDUCE_BYTES) instead of a new tensor."""
    return _plain_cpu(tensor) and tensor.nbytes >= ENGINE_ALLOCATED_ALLREDUCE_BYTES


def _cached_allreduce(tensor, in_place, name, op, prescale_factor, postscale_factor, process_set_id):
    """The steady state of a small synchronous allreduce: the C accelerator
    finds the argument block _allreduce_now left for this call and runs it
    (see horovod.common.engine_calls.run_cached_block). The result (`tensor`
    itself when `in_place`, else a new tensor like it); None, having done
    nothing, for a call the accelerator does not take: the caller goes on to
    _allreduce_now."""
    try:
        return run_cached_block(_ALLREDUCE, tensor, in_place, name, op, 0, prescale_factor, postscale_factor,
                                process_set_id)
    except _CoreMismatchError as e:
        _raise_torch_error(e)


_torch_tensors_taken = False


def _take_torch_tensors():
    global _torch_tensors_taken
    if not _torch_tensors_taken:
        take_torch_tensors(torch)
        _torch_tensors_taken = True


def _remember_allreduce(state, block, tensor, in_place, name, op, prescale_factor, postscale_factor, process_set_id):
    """Hands a new argument block of _allreduce_now to the C accelerator's
    table, which _cached_allreduce looks in."""
    _take_torch_tensors()
    remember_block(state, block, _ALLREDUCE, tensor, in_place, name, op, 0, prescale_factor, postscale_factor,
                   process_set_id)


def _allreduce_now(tensor, op, name, prescale_factor, postscale_factor, process_set_id, output=None):
    """Synchronous single-tensor allreduce into `output` (a new tensor when None).

    The latency-critical path: small allreduces cost little more than the
    engine's own work, so checks and descriptors are made once. A large
    out-of-place result is a block of the engine's result pool instead of a
    new tensor, whose fresh pages would cost as much as the reduction.
    """
    plain = _plain_cpu(tensor)  # checked once for both paths below
    if plain and output is None and tensor.nbytes >= ENGINE_ALLOCATED_ALLREDUCE_BYTES:
        return _handles_synchronize(_owned_results_async(c_api.ALLREDUCE, "allreduce", [tensor], name,
                                                         process_set_id, True, op, prescale_factor,
                                                         postscale_factor, caller_waits=True))
    if plain and (output is None or output is tensor) and (name is None or type(name) is str):
        # A plain contiguous CPU tensor: its argument block comes from the
        # per-thread cache, keyed by everything the block holds but the data
        # pointers.
        in_place = output is tensor
        key = (_ALLREDUCE_KEY, name, tensor.shape, tensor.dtype, op, prescale_factor, postscale_factor,
               process_set_id, in_place)
        state = thread_sync()
        entry = state.blocks.get(key)
        if entry is None:
            code_bits = _DLPACK_TYPES.get(tensor.dtype)
            if code_bits is not None:
                desc = TensorDesc(0, tensor.shape, *code_bits)
                entry = sync_template(c_api.ALLREDUCE, desc, desc, full_name("allreduce", name), process_set_id,
                                      op, 0, prescale_factor, postscale_factor)
                if len(state.blocks) >= _MAX_SYNC_BLOCKS:
                    state.blocks.clear()
                state.blocks[key] = entry
                _remember_allreduce(state, entry, tensor, in_place, name, op, prescale_factor, postscale_factor,
                                    process_set_id)
        if entry is not None:
            out = tensor if in_place else torch.empty_like(tensor)
            try:
                call_sync_addresses(entry, tensor.data_ptr(), out.data_ptr(), (tensor, out), state)
            except _CoreMismatchError as e:
                _raise_torch_error(e)
            return out
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


# ---------------------------------------------------------------------------
# allgather, alltoall, reducescatter: results sized by negotiation

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _owned_result_to_torch(c_handle, index, dtype, device):
    """The core-allocated result of tensor `index` as a tensor that takes the
    memory over (see _result_to_torch), and its hvd_result."""
    res = result(c_handle, index)
    return _result_to_torch(owned_address(res), dtype, device), res


def _result_to_torch(managed, dtype, device):
    """The core-allocated result (at `managed`, a DLManagedTensor) as a tensor that takes the
    memory over (DLPack; no copy, on a GPU or in host memory). A result
    torch's DLPack importer refuses is copied into a new tensor and the
    original freed."""
    def allocate(shape):
        out = torch.empty(shape, dtype=dtype)
        return out, out.data_ptr()

    out = adopt_owned_result(managed, torch.utils.dlpack.from_dlpack, allocate)
    if out.dtype != dtype:
        out = out.view(dtype)
    if out.device.type == "cpu" and device.type != "cpu":
        out = out.to(device)
    return out


def _splits_device(splits):
    """Where alltoall's received splits go: with the splits tensor, as Horovod does."""
    return splits.device if isinstance(splits, torch.Tensor) else None


def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError("splits must be an integer tensor, got %s" % splits.dtype)
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def _gather_like_async(collective, collective_name, tensors, name, process_set, single, reduce_op=Sum,
                       prescale_factor=1.0, postscale_factor=1.0, splits=None, caller_waits=False,
                       splits_device=None):
    """Enqueues an allgather, alltoall or reducescatter whose results the engine sizes;
    alltoall's received splits come back on `splits_device` (default: the CPU)."""
    return _owned_results_async(collective, collective_name, tensors, name, _process_set_id(process_set), single,
                                reduce_op, prescale_factor, postscale_factor, splits, caller_waits, splits_device)


def _owned_results_async(collective, collective_name, tensors, name, ps_id, single, reduce_op=Sum,
                         prescale_factor=1.0, postscale_factor=1.0, splits=None, caller_waits=False,
                         splits_device=None):
    """Enqueues a collective whose results the engine allocates (see _gather_like_async)."""
    _check_one_device(tensors)
    hosts = [_to_host(t) for t in tensors]
    inputs = [_describe(h) for h in hosts]
    kinds = [(t.dtype, t.device) for t in tensors]

    def finish(h):
        outs = [_owned_result_to_torch(h, i, *kinds[i]) for i in range(len(tensors))]
        if collective == c_api.ALLTOALL:
            received = torch.tensor(received_splits(outs[0][1]), dtype=torch.int32, device=splits_device)
            return outs[0][0], received
        tensors_out = [o[0] for o in outs]
        return tensors_out[0] if single else tensors_out

    return _handles.submit(finish, [tensors, hosts], collective, inputs,
                           _tensor_names(collective_name, name, len(tensors)), ps_id, reduce_op=reduce_op,
                           prescale_factor=prescale_factor, postscale_factor=postscale_factor, splits=splits,
                           caller_waits=caller_waits)


def _owned_result_now(collective, collective_name, tensor, name, process_set, reduce_op=Sum, prescale_factor=1.0,
                      postscale_factor=1.0):
    """A synchronous single-tensor allgather or reducescatter (results the engine sizes)."""
    if (type(tensor) is torch.Tensor and tensor.is_cpu and tensor.layout is _STRIDED
            and (name is None or type(name) is str)):
        # The synchronous path without an integer handle (as allreduce's):
        # half the Python cost of a small call.
        managed = _run_sync_owned(collective, _describe(tensor), full_name(collective_name, name),
                                  _process_set_id(process_set), tensor, reduce_op, prescale_factor, postscale_factor,
                                  COPIED_RESULT_BYTES)
        if type(managed) is tuple:  # a small result, copied by the C accelerator
            data, shape = managed
            if not data:
                return torch.empty(shape, dtype=tensor.dtype)
            out = torch.frombuffer(data, dtype=tensor.dtype)
            # A 1-D result has its shape already; view() costs as much as frombuffer.
            return out if len(shape) == 1 else out.view(shape)
        return _result_to_torch(managed, tensor.dtype, tensor.device)
    return _handles_synchronize(_gather_like_async(collective, collective_name, [tensor], name, process_set, True,
                                                   reduce_op, prescale_factor, postscale_factor, caller_waits=True))


def _allgather_now(tensor, name, process_set):
    return _owned_result_now(c_api.ALLGATHER, "allgather", tensor, name, process_set)
