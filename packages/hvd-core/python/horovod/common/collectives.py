# collectives.py - Horovod's collective API on numpy arrays, for code that
# depends on hvd-core alone (no framework). Signatures and defaults follow
# horovod.torch; results are new numpy arrays unless the name ends in "_".
"""Collectives on numpy arrays: allreduce, allgather, broadcast, alltoall,
reducescatter, grouped variants, barrier and join."""

import ctypes
import struct
import sys

import numpy as np

from horovod.common import c_api
from horovod.common.basics import Average, HorovodBasics, Sum
from horovod.common.engine_calls import (COPIED_RESULT_BYTES, ENGINE_ALLOCATED_ALLREDUCE_BYTES, HandleManager,
                                         OwnedResultMemory, TensorDesc, call_sync, call_sync_buffers, call_sync_owned,
                                         call_sync_owned_buffer, free_owned, full_name, group_tensor_names,
                                         owned_address, read_owned, received_splits, result, run_sync, run_sync_owned,
                                         sync_template)
from horovod.common.engine_calls import remember_block as _remember_block
from horovod.common.engine_calls import run_cached_block as _run_block
from horovod.common.engine_calls import thread_sync as _thread_sync
from horovod.common.objects import dump_object, load_object
from horovod.common.process_sets import global_process_set, process_set_id_of
from horovod.common.util import get_average_backwards_compatibility_fun

__all__ = [
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "broadcast_", "broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "poll", "synchronize", "broadcast_object", "allgather_object",
]

_handles = HandleManager()
_average_compat = get_average_backwards_compatibility_fun(HorovodBasics)

# numpy dtype -> DLPack (code, bits); bfloat16 is added by _dlpack_type.
_DLPACK_TYPES = {
    np.dtype(np.uint8): (c_api.kDLUInt, 8), np.dtype(np.int8): (c_api.kDLInt, 8),
    np.dtype(np.uint16): (c_api.kDLUInt, 16), np.dtype(np.int16): (c_api.kDLInt, 16),
    np.dtype(np.int32): (c_api.kDLInt, 32), np.dtype(np.int64): (c_api.kDLInt, 64),
    np.dtype(np.float16): (c_api.kDLFloat, 16), np.dtype(np.float32): (c_api.kDLFloat, 32),
    np.dtype(np.float64): (c_api.kDLFloat, 64), np.dtype(np.bool_): (c_api.kDLBool, 8),
}


def _dlpack_type(dtype):
    """The DLPack (code, bits) of a numpy dtype, None when hvd does not take it.
    numpy's bfloat16 is ml_dtypes', so a bfloat16 array means ml_dtypes is
    imported already: it is looked up in sys.modules when an unknown dtype
    comes, not imported with hvd (that import costs each process about 0.75 s
    of CPU with ml_dtypes 0.7 and numpy 2, which every rank of every job paid)."""
    code_bits = _DLPACK_TYPES.get(dtype)
    if code_bits is None:
        ml_dtypes = sys.modules.get("ml_dtypes")
        if ml_dtypes is not None:
            _DLPACK_TYPES[np.dtype(ml_dtypes.bfloat16)] = (c_api.kDLBfloat, 16)
            code_bits = _DLPACK_TYPES.get(dtype)
    return code_bits


# Synchronous allreduce/broadcast calls keep their argument blocks in the
# per-thread cache of engine_calls.thread_sync(), keyed (collective, name,
# shape, op, factors, process set id, in place) -> (dtype, its
# engine_calls.sync_template block). A hit skips describing the
# array, naming the tensor and finding the block: for a small collective
# those cost more than the engine does. The dtype is compared by identity
# (numpy's native dtypes are singletons; anything else takes the general
# path, which checks it).
_MAX_SYNC_BLOCKS = 4096
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address_if_simple(array):
    """The data address of a writable, C-contiguous, non-empty ndarray (what
    ctypes' from_buffer accepts), or None for anything else."""
    try:
        return _addressof(_from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return None


def _cached_template(state, key, tensor, output, collective, name, process_set_id, op, root_rank, prescale_factor,
                     postscale_factor):
    """This call site's argument block (a sync_template) from the per-thread
    cache (`state`); `output` None: the engine allocates the result. None
    when an array is not a plain writable one the cache can take."""
    entry = state.blocks.get(key)
    if entry is not None and entry[0] is tensor.dtype:
        return entry[1]
    entry = _sync_entry(collective, tensor, output, name, process_set_id, op, root_rank, prescale_factor,
                        postscale_factor)
    if entry is None:
        return None
    if len(state.blocks) >= _MAX_SYNC_BLOCKS:
        state.blocks.clear()
    state.blocks[key] = entry
    return entry[1]


def _filled_block(template, tensor, output):
    """The address of `template` with the data pointers of `tensor` and
    `output` (None, or `tensor` itself: one array) filled in; None when an
    array offers no writable, contiguous, non-empty buffer."""
    try:
        in_ptr = _addressof(_from_buffer(tensor))
        out_ptr = in_ptr if output is tensor or output is None else _addressof(_from_buffer(output))
    except (TypeError, ValueError, BufferError):
        return None
    buf, base, in_offset, out_offset, _ = template
    _POINTER_PACK(buf, in_offset, in_ptr)
    if out_offset is not None:
        _POINTER_PACK(buf, out_offset, out_ptr)
    return base


def _run_cached(key, tensor, output, collective, name, process_set_id, op, root_rank, prescale_factor,
                postscale_factor):
    """Runs a synchronous single-tensor collective from the per-thread block
    cache; returns False (having done nothing) when `tensor` (or `output`, if
    not in place) is not a plain writable array the cache can take."""
    state = _thread_sync()
    template = _cached_template(state, key, tensor, output, collective, name, process_set_id, op, root_rank,
                                prescale_factor, postscale_factor)
    if template is None:
        return False
    _remember_block(state, template, collective, tensor, output is tensor, name, op, root_rank, prescale_factor,
                    postscale_factor, process_set_id)
    keepalive = tensor if output is tensor else (tensor, output)
    if call_sync_buffers(template, tensor, output, keepalive, state):
        return True
    base = _filled_block(template, tensor, output)
    if base is None:
        return False
    call_sync(base, keepalive, state)
    return True


def _clear_handles():
    _handles.clear()


def _describe(array, what="tensor", written=False):
    """The TensorDesc of `array`; `written`: the engine stores results into it."""
    if not isinstance(array, np.ndarray):
        raise ValueError("%s must be a numpy.ndarray, got %s" % (what, type(array).__name__))
    flags = array.flags
    # The table holds native byte orders only (a dtype's byte order is part
    # of its equality), so one lookup also rules out swapped arrays.
    code_bits = _dlpack_type(array.dtype)
    if code_bits is None or (written and not flags.writeable) or not flags.c_contiguous:
        _refuse(array, what, written)
    try:
        # Twice as fast as array.ctypes.data, which matters for small
        # collectives; needs a writable, non-empty buffer.
        pointer = ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        pointer = array.ctypes.data
    return TensorDesc(pointer, array.shape, *code_bits)


_POINTER_PACK = struct.Struct("<Q").pack_into


def _refuse(array, what, written):
    """Raises the error that says why _describe cannot take `array`."""
    if written and not array.flags.writeable:
        raise ValueError("%s is read-only (e.g. a read-only memmap or a view with writeable=False) and the "
                         "result would be written into it: pass a writable array, such as array.copy()" % what)
    if not array.dtype.isnative:
        raise ValueError("%s has dtype %s in non-native byte order; hvd reduces in this machine's byte "
                         "order: convert it first, e.g. array.astype(array.dtype.newbyteorder('='))"
                         % (what, array.dtype.str))
    if _dlpack_type(array.dtype) is None:
        raise ValueError("Tensor type %s is not supported." % array.dtype.name)
    raise ValueError("Tensor is required to be contiguous.")


def _sync_entry(collective, tensor, output, name, process_set_id, op, root_rank, prescale_factor,
                postscale_factor):
    """A _sync_blocks entry for these arguments, or None when `tensor` or
    `output` is something the general path has to check (and refuse with
    its error, or take: read-only inputs, empty arrays). `output` None: the
    engine allocates the result."""
    if _dlpack_type(tensor.dtype) is None or _address_if_simple(tensor) is None:
        return None
    if output is not tensor and output is not None and (output.dtype is not tensor.dtype
                                                         or _address_if_simple(output) is None):
        return None
    desc = _describe(tensor)
    out_desc = desc if output is tensor else None if output is None else _describe(output)
    return tensor.dtype, sync_template(collective, desc, out_desc, full_name(_NAMES[collective], name),
                                       process_set_id, op, root_rank, prescale_factor, postscale_factor)


_NAMES = {c_api.ALLREDUCE: "allreduce", c_api.BROADCAST: "broadcast", c_api.ALLGATHER: "allgather",
          c_api.REDUCESCATTER: "reducescatter"}
_ALLREDUCE = c_api.ALLREDUCE
_BROADCAST = c_api.BROADCAST


def _owned_result_to_numpy(c_handle, index, dtype):
    """Tensor `index`'s core-owned result as a numpy array (see _owned_to_numpy), and its hvd_result."""
    res = result(c_handle, index)
    return _owned_to_numpy(owned_address(res), dtype), res


def _owned_to_numpy(managed, dtype):
    """The core-owned host result at `managed` as a numpy array of `dtype`:
    a small one copied (the core's freed), a large one over the core's memory
    (freed with the array: no copy, no second allocation)."""
    data, shape, nbytes, _, deleter = read_owned(managed)
    if nbytes > COPIED_RESULT_BYTES:
        return np.asarray(OwnedResultMemory(managed, deleter, data, nbytes)).view(dtype).reshape(shape)
    out = np.empty(shape, dtype=dtype)
    if nbytes:
        address = _address_if_simple(out)  # None for dtypes the buffer protocol cannot name (float16)
        ctypes.memmove(out.ctypes.data if address is None else address, data, nbytes)
    free_owned(managed, deleter)
    return out


def _result_from_pool(tensor):
    """Whether an out-of-place allreduce of `tensor` should let the engine
    allocate its result (from its pool of reused blocks; see
    engine_calls.ENGINE_ALLOCATED_ALLREDUCE_BYTES) instead of a new array."""
    return (type(tensor) is np.ndarray and tensor.flags.c_contiguous
            and tensor.nbytes >= ENGINE_ALLOCATED_ALLREDUCE_BYTES)


def _allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set, collective,
                     caller_waits=False):
    process_set_id = process_set_id_of(process_set)
    inputs = [_describe(t) for t in tensors]
    outs = [_describe(o, "output", written=True) for o in outputs]
    names = group_tensor_names(collective, name, len(tensors))
    single = len(tensors) == 1 and collective == "allreduce"
    return _handles.submit(lambda h: outputs[0] if single else list(outputs), [tensors, outputs, inputs, outs],
                           c_api.ALLREDUCE, inputs, names, process_set_id, outputs=outs, reduce_op=op,
                           prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                           caller_waits=caller_waits)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts a reduction (average by default) of a numpy array across all ranks without waiting;
    the result goes to a new array and `tensor` itself is left untouched.

    Ranks pair up operations by `name`: each rank has to submit an array of identical dtype and
    shape under the same name, and no data moves before every rank has submitted it. Without a
    `name`, the engine generates one from a running counter.

    Returns:
        A handle to pass to `poll()` or `synchronize()`.
    """
    op = _average_compat(op, average)
    if _result_from_pool(tensor):
        return _gather_like_async(c_api.ALLREDUCE, "allreduce", [tensor], name, process_set, True, op,
                                  prescale_factor, postscale_factor)
    output = np.empty_like(tensor) if isinstance(tensor, np.ndarray) else None
    return _allreduce_async([tensor], [output], name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce")


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces a numpy array across all ranks (average by default) and returns the result as a new
    array; `tensor` itself is left untouched.

    Args:
        tensor: the numpy array to reduce.
        average: Deprecated; use `op`.
        name: optional name under which the ranks match this operation.
        op: The reduction operation (Average, Sum, Min, Max, Product). Defaults to Average.
        prescale_factor: every rank's input is multiplied by this before the reduction.
        postscale_factor: the reduced result is multiplied by this afterwards.
        process_set: the ProcessSet whose ranks take part; the global process set unless given.

    Returns:
        An array of the same shape and type as `tensor`, reduced across all processes.
    """
    if average is not None:
        op = _average_compat(op, average)
    elif op is None:  # the default, without a call
        op = Average
    process_set_id = 0 if process_set is global_process_set else process_set_id_of(process_set)
    output = _run_block(_ALLREDUCE, tensor, False, name, op, 0, prescale_factor, postscale_factor, process_set_id)
    if output is not None:
        return output
    if _result_from_pool(tensor):
        return synchronize(_gather_like_async(c_api.ALLREDUCE, "allreduce", [tensor], name, process_set, True, op,
                                              prescale_factor, postscale_factor, caller_waits=True))
    if isinstance(tensor, np.ndarray) and (name is None or type(name) is str):
        output = np.empty_like(tensor)
        key = (_ALLREDUCE, name, tensor.shape, op, prescale_factor, postscale_factor, process_set_id, False)
        if _run_cached(key, tensor, output, _ALLREDUCE, name, process_set_id, op, 0, prescale_factor,
                       postscale_factor):
            return output
    desc = _describe(tensor)
    output = np.empty_like(tensor)
    run_sync(c_api.ALLREDUCE, desc, _describe(output), full_name("allreduce", name), process_set_id,
             op, 0, prescale_factor, postscale_factor, keepalive=(tensor, output))
    return output


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Asynchronous in-place allreduce; `tensor` receives the result. Returns a handle."""
    op = _average_compat(op, average)
    return _allreduce_async([tensor], [tensor], name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce")


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns `tensor`, which holds the result."""
    if average is not None:
        op = _average_compat(op, average)
    elif op is None:  # the default, without a call
        op = Average
    process_set_id = 0 if process_set is global_process_set else process_set_id_of(process_set)
    if _run_block(_ALLREDUCE, tensor, True, name, op, 0, prescale_factor, postscale_factor, process_set_id) is not None:
        return tensor
    if isinstance(tensor, np.ndarray) and (name is None or type(name) is str):
        key = (_ALLREDUCE, name, tensor.shape, op, prescale_factor, postscale_factor, process_set_id, True)
        if _run_cached(key, tensor, tensor, _ALLREDUCE, name, process_set_id, op, 0, prescale_factor,
                       postscale_factor):
            return tensor
    desc = _describe(tensor, written=True)
    run_sync(c_api.ALLREDUCE, desc, desc, full_name("allreduce", name), process_set_id, op, 0,
             prescale_factor, postscale_factor, keepalive=tensor)
    return tensor


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce of a list of tensors, negotiated and run as one group.

    Returns:
        A handle for `synchronize()`, which returns the list of reduced arrays.
    """
    op = _average_compat(op, average)
    outputs = [np.empty_like(t) if isinstance(t, np.ndarray) else None for t in tensors]
    return _allreduce_async(list(tensors), outputs, name, op, prescale_factor, postscale_factor, process_set,
                            "grouped_allreduce")


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Allreduce of a list of tensors as one group; returns the list of reduced arrays."""
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                                               process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous in-place grouped allreduce. Returns a handle."""
    op = _average_compat(op, average)
    return _allreduce_async(list(tensors), list(tensors), name, op, prescale_factor, postscale_factor,
                            process_set, "grouped_allreduce")


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns `tensors`."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def _gather_like_async(collective, collective_name, tensors, name, process_set, single, reduce_op=Sum,
                       prescale_factor=1.0, postscale_factor=1.0, splits=None, caller_waits=False):
    process_set_id = process_set_id_of(process_set)
    inputs = [_describe(t) for t in tensors]
    names = group_tensor_names(collective_name, name, len(tensors))
    dtypes = [t.dtype for t in tensors]

    def finish(h):
        outs = [_owned_result_to_numpy(h, i, dtypes[i]) for i in range(len(tensors))]
        if collective == c_api.ALLTOALL:
            res = outs[0][1]
            received = np.array(received_splits(res), dtype=np.int32)
            return outs[0][0] if splits is None or splits[0] is None else (outs[0][0], received)
        arrays = [o[0] for o in outs]
        return arrays[0] if single else arrays

    return _handles.submit(finish, [tensors, inputs], collective, inputs, names, process_set_id,
                           reduce_op=reduce_op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                           splits=splits, caller_waits=caller_waits)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronous allgather; returns a handle. See `allgather`."""
    return _gather_like_async(c_api.ALLGATHER, "allgather", [tensor], name, process_set, True)


def allgather(tensor, name=None, process_set=global_process_set):
    """Gathers a numpy array from all ranks and returns the ranks' arrays stacked along the first
    dimension, in rank order; `tensor` itself is left untouched.

    The ranks' arrays may differ in their first dimension only: the number of dimensions and the
    remaining sizes must match.

    Returns:
        An array of the same type as `tensor`, concatenated on dimension zero across
        all processes. Its first dimension is the sum of the inputs' first dimensions.
    """
    if type(tensor) is np.ndarray and (name is None or type(name) is str):
        return _owned_result_now(c_api.ALLGATHER, tensor, name, process_set)
    return synchronize(_gather_like_async(c_api.ALLGATHER, "allgather", [tensor], name, process_set, True,
                                          caller_waits=True))


def _owned_result_now(collective, tensor, name, process_set, reduce_op=Sum, prescale_factor=1.0,
                      postscale_factor=1.0):
    """A synchronous single-array collective whose result the engine sizes and
    allocates (allgather, reducescatter), without an integer handle; its
    argument block comes from the per-thread cache as allreduce's does."""
    process_set_id = 0 if process_set is global_process_set else process_set_id_of(process_set)
    managed = _run_block(collective, tensor, False, name, reduce_op, 0, prescale_factor, postscale_factor,
                         process_set_id)
    if managed is not None:
        return managed if type(managed) is np.ndarray else _owned_to_numpy(managed, tensor.dtype)
    state = _thread_sync()
    key = (collective, name, tensor.shape, reduce_op, prescale_factor, postscale_factor, process_set_id)
    template = _cached_template(state, key, tensor, None, collective, name, process_set_id, reduce_op, 0,
                                prescale_factor, postscale_factor)
    if template is not None:
        _remember_block(state, template, collective, tensor, False, name, reduce_op, 0, prescale_factor,
                        postscale_factor, process_set_id)
    managed = None if template is None else call_sync_owned_buffer(template, tensor, tensor, state,
                                                                   COPIED_RESULT_BYTES)
    if type(managed) is tuple:  # a small result, copied by the accelerator
        data, shape = managed
        out = np.frombuffer(data, tensor.dtype)
        return out if len(shape) == 1 else out.reshape(shape)
    if managed is None:
        base = None if template is None else _filled_block(template, tensor, None)
        if base is None:  # read-only, strided, empty or refused: described and checked on the general path
            managed = run_sync_owned(collective, _describe(tensor), full_name(_NAMES[collective], name),
                                     process_set_id, tensor, reduce_op, prescale_factor, postscale_factor)
        else:
            managed = call_sync_owned(base, tensor, state)
    return _owned_to_numpy(managed, tensor.dtype)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronous allgather of a list of tensors as one group; returns a handle."""
    return _gather_like_async(c_api.ALLGATHER, "grouped_allgather", list(tensors), name, process_set, False)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of a list of tensors as one group; returns the list of gathered arrays."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


def _broadcast_async(tensor, output, root_rank, name, process_set, caller_waits=False):
    process_set_id = process_set_id_of(process_set)
    inputs = [_describe(tensor)]
    outs = [_describe(output, "output", written=True)]
    return _handles.submit(lambda h: output, [tensor, output, inputs, outs], c_api.BROADCAST, inputs,
                           [full_name("broadcast", name)], process_set_id, outputs=outs,
                           root_rank=root_rank, caller_waits=caller_waits)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronous broadcast; returns a handle. The input tensor is not modified."""
    output = np.empty_like(tensor) if isinstance(tensor, np.ndarray) else None
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies a numpy array from `root_rank` to all ranks and returns the root's value as a new
    array; `tensor` itself is left untouched.

    The tensor type and shape must be the same on all Horovod processes for a given name.

    Returns:
        An array of the same shape and type as `tensor`, with the value broadcasted from root rank.
    """
    process_set_id = 0 if process_set is global_process_set else process_set_id_of(process_set)
    output = _run_block(_BROADCAST, tensor, False, name, Sum, root_rank, 1.0, 1.0, process_set_id)
    if output is not None:
        return output
    if isinstance(tensor, np.ndarray) and (name is None or type(name) is str):
        output = np.empty_like(tensor)
        key = (_BROADCAST, name, tensor.shape, root_rank, process_set_id, False)
        if _run_cached(key, tensor, output, _BROADCAST, name, process_set_id, Sum, root_rank, 1.0, 1.0):
            return output
    desc = _describe(tensor)
    output = np.empty_like(tensor)
    run_sync(c_api.BROADCAST, desc, _describe(output), full_name("broadcast", name), process_set_id,
             root_rank=root_rank, keepalive=(tensor, output))
    return output


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronous in-place broadcast; returns a handle."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns `tensor`, which holds root's value."""
    process_set_id = 0 if process_set is global_process_set else process_set_id_of(process_set)
    if _run_block(_BROADCAST, tensor, True, name, Sum, root_rank, 1.0, 1.0, process_set_id) is not None:
        return tensor
    if isinstance(tensor, np.ndarray) and (name is None or type(name) is str):
        key = (_BROADCAST, name, tensor.shape, root_rank, process_set_id, True)
        if _run_cached(key, tensor, tensor, _BROADCAST, name, process_set_id, Sum, root_rank, 1.0, 1.0):
            return tensor
    desc = _describe(tensor, written=True)
    run_sync(c_api.BROADCAST, desc, desc, full_name("broadcast", name), process_set_id,
             root_rank=root_rank, keepalive=tensor)
    return tensor


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronous alltoall; returns a handle. See `alltoall`."""
    if splits is not None:
        splits = [int(s) for s in np.asarray(splits).reshape(-1)]
    return _gather_like_async(c_api.ALLTOALL, "alltoall", [tensor], name, process_set, True, splits=[splits])


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """All-to-all exchange: `tensor` is cut into consecutive blocks of rows, block i goes to rank i,
    and the blocks every rank sent here are joined in rank order. `tensor` itself is left
    untouched.

    The slicing is done on the first dimension, so the input tensors on the different
    processes must have the same rank and shape, except for the first dimension.

    Args:
        splits: rows of `tensor` to send to each rank, in rank order. If not provided,
            the first dimension is split equally by the number of processes.

    Returns:
        The gathered array; and, when `splits` was given, also an array with the number
        of rows received from each rank.
    """
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronous reducescatter; returns a handle. See `reducescatter`."""
    return _gather_like_async(c_api.REDUCESCATTER, "reducescatter", [tensor], name, process_set, True,
                              reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces a numpy array across all ranks and hands each rank its own block of rows of the
    result; `tensor` itself is left untouched.

    The first dimension is split as evenly as possible; lower ranks get one more row
    when it does not divide.

    Returns:
        This rank's block of the reduced tensor.
    """
    if type(tensor) is np.ndarray and (name is None or type(name) is str):
        return _owned_result_now(c_api.REDUCESCATTER, tensor, name, process_set, op, prescale_factor,
                                 postscale_factor)
    return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter of a list of tensors as one group; returns a handle."""
    return _gather_like_async(c_api.REDUCESCATTER, "grouped_reducescatter", list(tensors), name, process_set,
                              False, reduce_op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor)


def grouped_reducescatter(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatter of a list of tensors as one group; returns the list of blocks."""
    return synchronize(grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                                   postscale_factor))


def barrier(process_set=global_process_set):
    """Blocks until every rank of `process_set` has reached this call."""
    synchronize(_handles.submit_barrier(process_set_id_of(process_set)))


def join(device=-1):
    """Declares that this rank has run out of data and blocks until every rank has done the same.

    While some ranks have joined, the others can keep running allreduces, in which each joined
    rank stands in with zeros.

    Args:
        device: ignored (kept for Horovod compatibility).

    Returns:
        The rank that joined last.
    """
    return synchronize(_handles.submit_join())


def poll(handle):
    """Tells, without blocking, whether the asynchronous operation behind `handle` (allreduce,
    allgather, broadcast, ...) has finished. Once it returns True, `synchronize()` returns at
    once.

    Returns:
        True when the operation is done, False while it is still in progress.
    """
    return _handles.poll(handle)


def synchronize(handle):
    """Waits for the asynchronous operation behind `handle` to finish and returns its result.

    Raises:
        HorovodInternalError: a peer failed or the job was shut down.
        HorovodCollectiveMismatchError: the ranks disagreed about this collective.
    """
    return _handles.synchronize(handle)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Sends a picklable object from `root_rank` (a global rank, also on process
    sets) to every rank of `process_set` and returns it there.

    The object travels as bytes through this module's numpy collectives, so every
    binding (horovod.torch, horovod.tensorflow, ...) uses this one implementation
    whatever its framework: two collectives, the payload's length and then the
    payload, named `name` + ".len" and ".data" ("broadcast_object" by default;
    the name must be the same on every rank).

    Returns:
        The root's object (on the root, `obj` itself).
    """
    from horovod.common import rank  # the package imports this module: import late
    # Non-root ranks often pass None, so the default name must not depend on obj.
    name = name or "broadcast_object"
    is_root = rank() == root_rank
    payload = dump_object(obj) if is_root else np.zeros(0, np.uint8)
    length = broadcast(np.array([payload.size], dtype=np.int64), root_rank, name + ".len", process_set)
    if not is_root:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    broadcast_(payload, root_rank, name + ".data", process_set)
    return obj if is_root else load_object(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Collects a picklable object from every rank of `process_set`: a list of
    the ranks' objects in rank order, the same on every rank. Like
    broadcast_object, one implementation for every binding (collectives named
    `name` + ".sizes" and ".data", "allgather_object" by default).
    """
    name = name or "allgather_object"
    payload = dump_object(obj)
    sizes = allgather(np.array([payload.size], dtype=np.int64), name + ".sizes", process_set)
    data = allgather(payload, name + ".data", process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(load_object(data[offset:offset + n]))
        offset += n
    return out
