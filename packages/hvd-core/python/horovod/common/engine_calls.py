# engine_calls.py - the binding-neutral half of every collective: build DLPack
# descriptors, enqueue through the C ABI, hand out Horovod-style integer
# handles, wait, and fetch results. horovod.common.collectives (numpy) and
# the framework bindings are thin layers over this.
"""Enqueueing collectives and managing their handles."""

import ctypes
import importlib.machinery
import importlib.util
import itertools
import os
import struct
import sys
import threading
import time

from horovod.common import c_api, config
from horovod.common.exceptions import HorovodInternalError

__all__ = ["ENGINE_ALLOCATED_ALLREDUCE_BYTES", "TensorDesc", "enqueue", "HandleManager", "PackedGroup", "full_name",
           "group_tensor_names", "copy_owned_result", "adopt_owned_result", "OwnedResultMemory", "owned_address",
           "read_owned", "free_owned", "received_splits"]

# Out-of-place allreduces from this size up let the engine allocate their
# result, from its pool of reused blocks (HostResultPool), instead of writing
# into a new array: once a new array is fresh pages (from 32 MiB malloc always
# maps new memory), faulting them in costs about as much as the reduction
# (P=2, 32 MiB: 9.4 ms instead of 13-21 ms). The engine-allocated path costs
# some 50-90 us more per call in Python and handle work, so below 4 MiB
# (1 MiB: +90 us) the new array is cheaper; 4-16 MiB measured even.
ENGINE_ALLOCATED_ALLREDUCE_BYTES = 4 << 20

# Engine-allocated host results up to this size are copied into a new
# array or tensor and freed at once: cheaper than the object that lets the
# framework take the core's memory over (an array interface, a DLPack
# capsule), which pays off from about there on (P=2 numpy allgather, 4 KiB:
# 6.8 us copied, 7.8 us taken over; 16 KiB even; 64 KiB: 27.2 against 25.1
# us). The C accelerator makes the copy itself (run_owned's copy_limit).
COPIED_RESULT_BYTES = 16 << 10
# The same for the accelerator's table of repeated numpy calls
# (run_cached_block), which copies straight into a numpy.empty array: P=2
# allgather, 32 KiB from each rank, 8.7-8.8 us copied against 9.9-10.0 taken
# over; 128 KiB from each, 28.5-32.5 against 24.5-29.0 us. Since the table
# hands larger results to numpy in C (fastcall.c's handed_over, seventeenth
# session: 128 KiB from each 21.8-35.6 us against 37.7-52.0 taken over in
# Python), a limit of 1 KiB and this one gave the same times at 2-16 KiB
# from each rank within the noise (three alternated runs), so it stayed.
TABLE_COPIED_RESULT_BYTES = 64 << 10


# Byte layouts of the C ABI structs on LP64 (checked against the header by
# tests/python/test_packaging.py): packing them with one struct call is several times cheaper
# than filling ctypes.Structure fields, and small collectives are latency-bound.
_DLTENSOR = struct.Struct("<QiiiBBHQQQ")       # 48 bytes
_TENSOR_ARGS = struct.Struct("<QQQQQQQ")       # 56 bytes
_ENQUEUE_ARGS = struct.Struct("<QiiiiddQQQQQQIxxxxQ")  # 104 bytes (struct_size: up to `device_stream`, ABI 1.5)
_ENQUEUE_ARGS_SIZE = 104
_ENQUEUE_ARGS_SPAN = 104  # sizeof(hvd_enqueue_args)
_NULL_NAMES = (b"",)
_POINTER = struct.Struct("<Q")
_ON_DONE = struct.Struct("<QQ")  # hvd_enqueue_args.on_done and on_done_ctx
_ON_DONE_OFFSET = 72
_templates = threading.local()  # per-thread cache of packed argument blocks (see _args_block)
_MAX_TEMPLATES = 4096


class TensorDesc:
    """A tensor as the C ABI sees it: data pointer, shape, DLPack dtype (code, bits),
    device (DLPack type and id) and, for a CUDA tensor, the stream (a
    cudaStream_t as an integer; 0 is the legacy default stream) on which its
    framework produces it. Bindings build these from their framework's tensors;
    the first input's stream is the one the enqueue passes."""

    __slots__ = ("data_ptr", "shape", "code", "bits", "device_type", "device_id", "stream")

    def __init__(self, data_ptr, shape, dtype_code, dtype_bits, device_type=c_api.kDLCPU, device_id=0, stream=0):
        self.data_ptr = data_ptr or 0
        self.shape = tuple(shape)
        self.code = dtype_code
        self.bits = dtype_bits
        self.device_type = device_type
        self.device_id = device_id
        self.stream = stream


def full_name(collective, name):
    """Horovod's tensor naming: ``allreduce.<name>``; unnamed tensors get
    ``allreduce.noname.<n>`` from the engine."""
    if not name:
        return b""
    return ("%s.%s" % (collective, name)).encode()


def group_tensor_names(collective, name, count):
    """The full names of a group of `count` tensors submitted under `name`.

    A lone tensor carries `name` itself; the tensors of a larger group carry
    ``<name>_<i>``, so the same position matches across ranks. Without a
    name every tensor's is left to the engine.
    """
    if count == 1:
        return [full_name(collective, name)]
    return [full_name(collective, "%s_%d" % (name, i)) if name else b"" for i in range(count)]


def _pack_dltensor(buf, offset, desc, base):
    """Writes a DLTensor for `desc` at `offset` and its shape right after it."""
    shape_off = offset + _DLTENSOR.size
    _DLTENSOR.pack_into(buf, offset, desc.data_ptr, desc.device_type, desc.device_id, len(desc.shape), desc.code,
                        desc.bits, 1, base + shape_off, 0, 0)
    if desc.shape:
        struct.pack_into("<%dq" % len(desc.shape), buf, shape_off, *desc.shape)
    return shape_off + 8 * len(desc.shape)


# Horovod's meanings, asked for on every call: a root rank is a global rank,
# and a scale factor of 0.0 multiplies by zero.
_ALWAYS_FLAGS = c_api.ENQUEUE_ROOT_RANK_GLOBAL | c_api.ENQUEUE_SCALE_FACTORS_AS_GIVEN


def _pack(collective, inputs, names, process_set_id, outputs, reduce_op, root_rank, prescale_factor,
          postscale_factor, splits, caller_waits):
    """The hvd_enqueue_args block (with its tensor args, DLTensors, shapes and
    splits) in one buffer; pointers inside it are absolute. Also returns the
    offsets of every tensor's data pointer, so the block can be reused for
    other tensors of the same signature."""
    if not -2**31 <= root_rank < 2**31:
        # The C ABI's root_rank is 32 bits; say so instead of struct.error.
        raise ValueError("root_rank %d is not a rank: ranks are 32-bit integers" % root_rank)
    n = len(inputs)
    names = names or _NULL_NAMES
    size = _ENQUEUE_ARGS_SPAN + _TENSOR_ARGS.size * max(1, n)
    for i in range(n):
        size += 2 * (_DLTENSOR.size + 8 * len(inputs[i].shape))
        if splits is not None and splits[i] is not None:
            size += 8 * len(splits[i])
    size += sum(len(nm) + 8 for nm in names)  # NUL, then padding to 8 for the next DLTensor
    buf = ctypes.create_string_buffer(size)
    base = ctypes.addressof(buf)
    tensors_off = _ENQUEUE_ARGS_SPAN
    cursor = tensors_off + _TENSOR_ARGS.size * max(1, n)
    data_offsets = []  # (offset, index, is_output)
    for i in range(max(1, n)):
        name = names[i] if i < len(names) else b""
        in_ptr = out_ptr = splits_ptr = num_splits = 0
        if i < n:
            in_ptr = base + cursor
            data_offsets.append((cursor, i, False))
            cursor = _pack_dltensor(buf, cursor, inputs[i], base)
            if outputs is not None and outputs[i] is not None:
                out_ptr = base + cursor
                data_offsets.append((cursor, i, True))
                cursor = _pack_dltensor(buf, cursor, outputs[i], base)
            if splits is not None and splits[i] is not None:
                num_splits = len(splits[i])
                splits_ptr = base + cursor
                struct.pack_into("<%dq" % num_splits, buf, cursor, *splits[i])
                cursor += 8 * num_splits
        name_ptr = 0
        if name:
            name_ptr = base + cursor
            buf[cursor:cursor + len(name)] = name
            # The next tensor's DLTensor (int64 fields) must be 8-byte aligned.
            cursor = (cursor + len(name) + 1 + 7) & ~7
        _TENSOR_ARGS.pack_into(buf, tensors_off + i * _TENSOR_ARGS.size, _TENSOR_ARGS.size, in_ptr, out_ptr,
                               splits_ptr, num_splits, name_ptr, len(name))
    _ENQUEUE_ARGS.pack_into(buf, 0, _ENQUEUE_ARGS_SIZE, collective, process_set_id, reduce_op, root_rank,
                            prescale_factor, postscale_factor, base + tensors_off, n, 0, 0, 0, 0,
                            _ALWAYS_FLAGS | (c_api.ENQUEUE_CALLER_WAITS if caller_waits else 0),
                            inputs[0].stream if n else 0)
    return buf, data_offsets


def _args_block(collective, inputs, names, process_set_id, outputs, reduce_op, root_rank, prescale_factor,
                postscale_factor, splits, caller_waits):
    """The packed arguments for this call, reused across calls of the same
    signature (per thread): only the data pointers change from call to call,
    and building the block costs more than a small collective. Reuse is safe
    because hvd_enqueue copies everything it needs out of the block."""
    cache = getattr(_templates, "cache", None)
    if cache is None:
        cache = _templates.cache = {}
    key = (collective, tuple(names or _NULL_NAMES), process_set_id,
           tuple((d.shape, d.code, d.bits, d.device_type, d.device_id, d.stream) for d in inputs),
           None if outputs is None else tuple(None if o is None else (o.device_type, o.device_id) for o in outputs),
           None if splits is None else tuple(None if sp is None else tuple(sp) for sp in splits),
           reduce_op, root_rank, prescale_factor, postscale_factor, caller_waits)
    template = cache.get(key)
    if template is None:
        if len(cache) >= _MAX_TEMPLATES:
            cache.clear()
        buf, data_offsets = _pack(collective, inputs, names, process_set_id, outputs, reduce_op, root_rank,
                                  prescale_factor, postscale_factor, splits, caller_waits)
        template = cache[key] = (buf, ctypes.addressof(buf), data_offsets)
    buf, base, data_offsets = template
    for offset, index, is_output in data_offsets:
        _POINTER.pack_into(buf, offset, (outputs[index] if is_output else inputs[index]).data_ptr)
    return buf, base


class PackedGroup:
    """The argument block of an in-place collective on a group of tensors that
    comes back with the same shapes, dtypes and names call after call (a
    training step's gradient buckets), built once by its caller: a call
    writes only the tensors' addresses into it (`set_addresses`) before
    `HandleManager.submit_packed`. Through `enqueue` the per-tensor work of
    describing the tensors, naming them and finding the cached block made a
    102-tensor bucket's submission 0.34-0.42 ms, against 0.17-0.33 ms this
    way (one process, torch)."""

    __slots__ = ("buf", "base", "offsets", "reserved")

    def __init__(self, collective, inputs, names, process_set_id=0, reduce_op=1, prescale_factor=1.0,
                 postscale_factor=1.0, caller_waits=False):
        self.buf, data_offsets = _pack(collective, inputs, names, process_set_id, inputs, reduce_op, 0,
                                       prescale_factor, postscale_factor, None, caller_waits)
        self.base = ctypes.addressof(self.buf)
        # Each tensor's input and output DLTensors (in place: both its address).
        self.offsets = [[] for _ in inputs]
        for offset, index, _ in data_offsets:
            self.offsets[index].append(offset)
        self.reserved = tuple((process_set_id, n) for n in names if n)

    def set_addresses(self, addresses):
        buf, pack = self.buf, _POINTER.pack_into
        for (in_offset, out_offset), address in zip(self.offsets, addresses):
            pack(buf, in_offset, address)
            pack(buf, out_offset, address)


def enqueue(collective, inputs, names, process_set_id=0, outputs=None, reduce_op=1, root_rank=0,
            prescale_factor=1.0, postscale_factor=1.0, splits=None, caller_waits=False, on_done=0, on_done_ctx=0):
    """Enqueues one collective (several inputs = a group) and returns the C handle.

    Args:
        collective: a c_api collective constant (ALLREDUCE, ...).
        inputs: list of TensorDesc (empty for barrier and join).
        names: list of full names (bytes; b"" for an engine-generated name).
        outputs: optional list of TensorDesc (allreduce/broadcast) or None entries.
        splits: optional list (per input) of alltoall splits, or None.
        caller_waits: the caller synchronizes right away (HVD_ENQUEUE_CALLER_WAITS):
            its wait then runs the engine instead of waking the background thread.
        on_done, on_done_ctx: optional hvd_done_fn (an address, e.g. of a ctypes
            callback the caller keeps alive) and its context, called once on the
            engine's thread when the operation completes.
    Returns:
        (c_handle, keepalive): keep `keepalive` referenced until completion.
    """
    if on_done:
        # Every call has its own context: pack a fresh block rather than patch a cached one.
        buf, _ = _pack(collective, inputs, names, process_set_id, outputs, reduce_op, root_rank, prescale_factor,
                       postscale_factor, splits, caller_waits)
        _ON_DONE.pack_into(buf, _ON_DONE_OFFSET, on_done, on_done_ctx)
        return _enqueue_block(ctypes.addressof(buf)), []
    _, base = _args_block(collective, inputs, names, process_set_id, outputs, reduce_op, root_rank,
                          prescale_factor, postscale_factor, splits, caller_waits)
    return _enqueue_block(base), []


def _enqueue_block(base):
    """hvd_enqueue of the packed block at address `base`; the C handle."""
    handle = ctypes.c_void_p()
    c_api.check(c_api.lib().hvd_enqueue(base, ctypes.byref(handle)))
    return handle.value


# A wait returns to the interpreter at least this often (seconds), so Python
# signal handlers run while a collective is pending: Ctrl-C raises
# KeyboardInterrupt, pytest-timeout's SIGALRM fires. A collective that is
# already done returns from the first slice, so fast paths pay nothing.
_WAIT_SLICE_SECONDS = 0.05

# Operations whose waiter was interrupted (c handle -> objects owning their
# buffers): the engine still reads and writes those buffers until the
# operation completes, or until shutdown fails it, so they stay alive here.
_abandoned = {}
_abandoned_lock = threading.Lock()


def _release_finished_abandoned(library, everything=False):
    with _abandoned_lock:
        done = [h for h in _abandoned if everything or library.hvd_handle_poll(h)]
        for h in done:
            del _abandoned[h]
    for h in done:
        library.hvd_handle_release(h)


def _wait(library, c_handle, timeout=None):
    """hvd_handle_wait in slices, so that signal handlers run between them.

    Returns what hvd_handle_wait returned (NULL, the operation's error, or a
    TIMEOUT error once `timeout` seconds have passed; None waits for ever).
    """
    # Without a timeout each slice is one call of the accelerator, without
    # ctypes' argument conversions: a loop of async allreduces synchronizes
    # every handle, most of them done already (older builds lack `wait`).
    fast_wait = getattr(_fast, "wait", None) if timeout is None and _fast else None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if fast_wait is not None:
            err = fast_wait(c_handle)
        else:
            step = _WAIT_SLICE_SECONDS if deadline is None else min(_WAIT_SLICE_SECONDS,
                                                                     max(0.0, deadline - time.monotonic()))
            err = library.hvd_handle_wait(c_handle, step)
        if not err or library.hvd_error_get_code(err) != c_api.ERROR_TIMEOUT:
            return err
        if deadline is not None and time.monotonic() >= deadline:
            return err
        library.hvd_error_destroy(err)


def sync_template(collective, desc_in, desc_out, name, process_set_id, reduce_op=1, root_rank=0,
                  prescale_factor=1.0, postscale_factor=1.0):
    """A packed argument block for one synchronous single-tensor collective of
    this signature: (the block, its address as a c_void_p, the offsets of its
    input's and output's data pointers (the output's is None when the block
    has no output), its address as an int). Not cached: callers keep it (see
    run_sync and horovod.common.collectives' per-call-site caches) and reuse
    it on their own thread only."""
    outputs = None if desc_out is None else [desc_out]
    buf, data_offsets = _pack(collective, [desc_in], [name], process_set_id, outputs, reduce_op, root_rank,
                              prescale_factor, postscale_factor, None, True)
    offsets = [offset for offset, _, _ in data_offsets]
    address = ctypes.addressof(buf)
    return buf, ctypes.c_void_p(address), offsets[0], offsets[1] if len(offsets) > 1 else None, address


def _cached_sync_template(collective, desc_in, desc_out, name, process_set_id, reduce_op, root_rank,
                          prescale_factor, postscale_factor):
    """This thread's sync_template for one synchronous single-tensor call of
    this signature (desc_out None: the engine allocates the result)."""
    # A flat key (cheaper than _args_block's general one) for the same
    # per-thread template cache: a small collective's Python cost is mostly
    # finding its argument block.
    cache = getattr(_templates, "single", None)
    if cache is None:
        cache = _templates.single = {}
    key = (collective, name, process_set_id, desc_in.shape, desc_in.code, desc_in.bits, desc_in.device_type,
           desc_in.device_id, desc_in.stream, None if desc_out is None else (desc_out.device_type, desc_out.device_id),
           reduce_op, root_rank, prescale_factor, postscale_factor)
    template = cache.get(key)
    if template is None:
        if len(cache) >= _MAX_TEMPLATES:
            cache.clear()
        template = cache[key] = sync_template(collective, desc_in, desc_out, name, process_set_id, reduce_op,
                                              root_rank, prescale_factor, postscale_factor)
    return template


def run_sync(collective, desc_in, desc_out, name, process_set_id, reduce_op=1, root_rank=0, prescale_factor=1.0,
             postscale_factor=1.0, keepalive=None):
    """Enqueues one single-tensor collective and waits for it: the fast path of
    the synchronous API.

    `keepalive` holds the objects that own the descriptors' memory: if the
    wait is interrupted (KeyboardInterrupt, a signal handler's exception), they
    are kept until the operation completes or ``shutdown()`` ends it.

    Raises the operation's error.
    """
    template = _cached_sync_template(collective, desc_in, desc_out, name, process_set_id, reduce_op, root_rank,
                                     prescale_factor, postscale_factor)
    call_sync_addresses(template, desc_in.data_ptr, None if desc_out is None else desc_out.data_ptr, keepalive,
                        thread_sync())


class _ThreadSync:
    """Per-thread state of synchronous calls: the handle slot that
    hvd_enqueue_wait writes, and `blocks`, a cache its users key as they
    like (horovod.common.collectives keeps its call sites' argument blocks
    there)."""

    __slots__ = ("slot", "slot_ref", "slot_address", "blocks", "table", "result", "result_ref", "result_address",
                 "result_output")

    def __init__(self):
        self.slot = ctypes.c_void_p()
        self.slot_ref = ctypes.byref(self.slot)
        self.slot_address = ctypes.addressof(self.slot)
        self.blocks = {}
        # run_sync_owned's hvd_result, reused; result_output reads its
        # `output` as an address without building a ctypes pointer object.
        self.result = c_api.Result(struct_size=ctypes.sizeof(c_api.Result))
        self.result_ref = ctypes.byref(self.result)
        self.result_address = ctypes.addressof(self.result)
        self.result_output = ctypes.c_void_p.from_buffer(self.result, c_api.Result.output.offset)
        # The accelerator's table of this thread's repeated calls (see
        # run_cached_block and remember_block), or None without it.
        fast = fastcall()
        self.table = fast.sync_table(self.slot, self.slot_address, self.result, self.result_address,
                                     TABLE_COPIED_RESULT_BYTES) if fast else None


def thread_sync():
    """This thread's _ThreadSync."""
    state = getattr(_templates, "sync", None)
    if state is None:
        state = _templates.sync = _ThreadSync()
    return state


_raw_enqueue_wait = None


def raw_enqueue_wait():
    """hvd_enqueue_wait declared without argtypes: called with ctypes objects
    only (a c_void_p block address, a c_double, a byref), which ctypes passes
    without the per-argument conversion checks that cost as much as a small
    collective's engine work. Returns an hvd_error* as an int (or None)."""
    global _raw_enqueue_wait
    if _raw_enqueue_wait is None:
        function = c_api.lib()["hvd_enqueue_wait"]  # a new function object, not lib().hvd_enqueue_wait
        function.restype = ctypes.c_void_p
        _raw_enqueue_wait = function
    return _raw_enqueue_wait


_SLICE = ctypes.c_double(_WAIT_SLICE_SECONDS)

# The C accelerator (packages/hvd-core/pyext/fastcall.c, installed next to
# libhvd_core as _hvd_fastcall.abi3.so): it takes the data pointers and runs
# hvd_enqueue_wait in one C call, where ctypes costs a small allreduce as
# much again as the engine's own work. Without it (PyPy, CPython < 3.11, a
# build without Python headers, or HVD_FASTCALL=0) the ctypes calls below do
# the same. None: not looked for yet; False: not available.
FASTCALL_ENV_VAR = "HVD_FASTCALL"
_fast = None


def _load_fastcall():
    if os.environ.get(FASTCALL_ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if sys.implementation.name != "cpython" or sys.version_info < (3, 11):
        return False
    path = os.path.join(os.path.dirname(config.get_library_path()), "_hvd_fastcall.abi3.so")
    if not os.path.isfile(path):
        return False
    name = "horovod.common._hvd_fastcall"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    try:
        module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
        loader.exec_module(module)
    except ImportError:  # a copy built for another platform or Python: ctypes still works
        return False
    library = c_api.lib()
    module.bind(*[ctypes.cast(library[function], ctypes.c_void_p).value
                  for function in ("hvd_enqueue_wait", "hvd_enqueue", "hvd_handle_wait", "hvd_handle_get_result",
                                   "hvd_handle_release")], _WAIT_SLICE_SECONDS)
    _bind_numpy(module)
    return module


def _bind_numpy(module):
    """Lets the accelerator read numpy arrays' headers (run_cached_block);
    it checks the layout on these probes first and declines if it differs."""
    import numpy as np
    plain = np.zeros((3, 5), np.float32)
    view = np.zeros((4, 6), np.int16)[::2, 1:]
    view.flags.writeable = False
    module.bind_numpy(np.ndarray, np.empty, plain, plain.dtype, view, view.dtype)


def take_torch_tensors(torch):
    """Lets the accelerator's table (run_cached_block, remember_block) take
    plain torch CPU tensors as well as numpy arrays; a no-op without it."""
    fast = fastcall()
    if fast and hasattr(fast, "bind_torch"):  # an older build of the accelerator lacks it
        fast.bind_torch(torch.Tensor, torch.empty_like, torch.strided)


def fastcall():
    """The C accelerator module, or False when this process runs without it."""
    global _fast
    if _fast is None:
        _fast = _load_fastcall()
    return _fast


def _finish_sync(err, state):
    """After hvd_enqueue_wait returned `err`: waits for an operation still in
    flight (its handle in state.slot), releases it and raises the error."""
    handle = state.slot.value
    if handle:
        err = _wait(c_api.lib(), handle)  # an interrupt here leaves the handle in the slot
        c_api.lib().hvd_handle_release(handle)
        state.slot.value = None
    if err:
        c_api.check(err)


def _abandon_in_flight(state, keepalive):
    """An interrupted synchronous call: the operation in state.slot (if any)
    keeps `keepalive` until it completes."""
    handle = state.slot.value
    if handle:
        with _abandoned_lock:
            _abandoned[handle] = keepalive


def call_sync(base, keepalive, state=None):
    """Enqueues the packed block at `base` (an address, or a c_void_p holding
    it; its data pointers filled in) and waits for the operation; see
    run_sync. Raises the operation's error."""
    if _abandoned:
        _release_finished_abandoned(c_api.lib())
    if state is None:
        state = thread_sync()
    if type(base) is int:
        base = ctypes.c_void_p(base)
    # Enqueue, wait one slice and release in one call; only an operation
    # still in flight after the slice comes back as a handle (in the slot,
    # which the library clears first, so an interrupt at any point here
    # finds there what is still in flight).
    try:
        err = (_raw_enqueue_wait or raw_enqueue_wait())(base, _SLICE, state.slot_ref)
        if err or state.slot.value:
            _finish_sync(err, state)
    except BaseException:
        _abandon_in_flight(state, keepalive)
        raise


def run_cached_block(collective, tensor, in_place, name, op, root_rank, prescale_factor, postscale_factor,
                     process_set_id):
    """The steady state of a synchronous single-tensor call, in one frame and
    one C call: the accelerator finds this thread's argument block for the
    call (remember_block added it) and runs it on `tensor`, into `tensor`
    itself when `in_place`, else into a new array like it. Returns that
    result once the operation completed (for a result the engine allocates,
    allgather and reducescatter: a new array, a copy when it is at most
    TABLE_COPIED_RESULT_BYTES, else over the engine's memory, which the
    array frees; a device result's DLManagedTensor address, now the
    caller's). None, having done nothing, when the block is not there,
    `tensor` is not a plain writable contiguous non-empty numpy array (or,
    after take_torch_tensors, a plain CPU torch tensor not requiring
    gradients), without the accelerator, or while interrupted operations
    wait to be released: the caller's general path then does it. At 4 KiB
    every frame and dictionary lookup less is measurable."""
    state = getattr(_templates, "sync", None)
    if state is None or state.table is None or _abandoned:
        return None
    try:
        outcome = _fast.run_cached(state.table, collective, tensor, in_place, name, op, root_rank, prescale_factor,
                                   postscale_factor, process_set_id)
        if type(outcome) is tuple:
            if len(outcome) == 1:  # an engine-allocated result, failed or not finished yet
                return _finish_owned(outcome[0], state, tensor)
            _finish_sync(outcome[0], state)
            return outcome[1]
    except BaseException:
        _abandon_in_flight(state, (tensor, _fast.pending_output(state.table)))
        raise
    return outcome


def remember_block(state, template, collective, tensor, in_place, name, op, root_rank, prescale_factor,
                   postscale_factor, process_set_id):
    """Adds a sync_template block to this thread's accelerator table, for
    run_cached_block to find when the same call comes again."""
    if state.table is not None:
        _fast.remember(state.table, collective, tensor, in_place, name, op, root_rank, prescale_factor,
                       postscale_factor, process_set_id, template[0], template[4], template[2], template[3])


def async_table():
    """This thread's accelerator table for HandleManager.submit_cached, or
    None without an accelerator that has it (older builds lack it)."""
    table = thread_sync().table
    return table if table is not None and hasattr(_fast, "submit_cached") else None


def remember_async_block(table, group, tensor, name, op, prescale_factor, postscale_factor, process_set_id,
                         caller_waits):
    """Adds the block of a one-tensor in-place PackedGroup (an asynchronous
    allreduce of `tensor`) to `table` (async_table's), for
    HandleManager.submit_cached to find when the same call comes again.
    False when the accelerator does not take the call."""
    in_offset, out_offset = group.offsets[0]
    return _fast.remember(table, c_api.ALLREDUCE, tensor, True, name, op, 0, prescale_factor, postscale_factor,
                          process_set_id, group.buf, group.base, in_offset, out_offset, 2 if caller_waits else 1)


def call_sync_buffers(template, tensor, output, keepalive, state):
    """call_sync for a sync_template block whose data pointers the C
    accelerator takes from the buffers of `tensor` and `output` (`tensor`
    itself or None: in place, or no output). False, having done nothing,
    without the accelerator or when an array offers no writable contiguous
    non-empty buffer; True once the operation completed."""
    fast = _fast if _fast is not None else fastcall()
    if not fast:
        return False
    if _abandoned:
        _release_finished_abandoned(c_api.lib())
    try:
        outcome = fast.run(template[4], state.slot_address, template[2], template[3], tensor, output)
        if outcome is not None:
            if outcome is False:
                return False
            _finish_sync(outcome, state)
    except BaseException:
        _abandon_in_flight(state, keepalive)
        raise
    return True


def call_sync_addresses(template, in_address, out_address, keepalive, state):
    """call_sync for a sync_template block, with its data pointers (the
    output's ignored when the block has none) filled in here."""
    fast = _fast if _fast is not None else fastcall()
    if not fast:
        _POINTER.pack_into(template[0], template[2], in_address)
        if template[3] is not None:
            _POINTER.pack_into(template[0], template[3], out_address)
        call_sync(template[1], keepalive, state)
        return
    if _abandoned:
        _release_finished_abandoned(c_api.lib())
    try:
        err = fast.run(template[4], state.slot_address, template[2], template[3], in_address, out_address)
        if err is not None:
            _finish_sync(err, state)
    except BaseException:
        _abandon_in_flight(state, keepalive)
        raise


def run_sync_owned(collective, desc_in, name, process_set_id, keepalive=None, reduce_op=1, prescale_factor=1.0,
                   postscale_factor=1.0, copy_limit=0):
    """run_sync for a single-tensor collective whose result the engine
    allocates (allgather, reducescatter): enqueues, waits and returns the
    address of the finished operation's result (a DLManagedTensor), which the
    caller now owns (read_owned, adopt_owned_result). Skips the integer
    handle's bookkeeping, closures and the general argument-block key, which
    cost a small allgather twice the engine's own time. With the C
    accelerator, a host result of at most `copy_limit` bytes comes back
    copied instead, as (bytearray, shape), the engine's result freed.

    Raises the operation's error; an interrupted wait leaves the operation to
    complete with `keepalive` referenced, as run_sync does.
    """
    template = _cached_sync_template(collective, desc_in, None, name, process_set_id, reduce_op, 0, prescale_factor,
                                     postscale_factor)
    state = thread_sync()
    outcome = call_sync_owned_buffer(template, desc_in.data_ptr, keepalive, state, copy_limit)
    if outcome is not None:  # an address is always taken: None means no accelerator
        return outcome
    buf, base, in_offset, _, _ = template
    _POINTER.pack_into(buf, in_offset, desc_in.data_ptr)
    return call_sync_owned(base, keepalive, state)


_owned_calls = None


def _raw_owned_calls():
    """hvd_enqueue, hvd_handle_wait, hvd_handle_get_result and
    hvd_handle_release declared without argtypes (see raw_enqueue_wait)."""
    global _owned_calls
    if _owned_calls is None:
        library = c_api.lib()
        functions = []
        for name, restype in (("hvd_enqueue", ctypes.c_void_p), ("hvd_handle_wait", ctypes.c_void_p),
                              ("hvd_handle_get_result", ctypes.c_void_p), ("hvd_handle_release", None)):
            function = library[name]  # a new function object: lib()'s declared one keeps its argtypes
            function.restype = restype
            functions.append(function)
        _owned_calls = tuple(functions)
    return _owned_calls


def call_sync_owned(base, keepalive, state=None):
    """run_sync_owned for a packed block at `base` (a c_void_p; its input
    pointer filled in): returns the result's DLManagedTensor address."""
    library = c_api.lib()
    if _abandoned:
        _release_finished_abandoned(library)
    if state is None:
        state = thread_sync()
    enqueue, wait, _, _ = _owned_calls or _raw_owned_calls()
    state.slot.value = None
    err = enqueue(base, state.slot_ref)
    if err:
        c_api.check(err)
    # Every call passes the slot (a c_void_p) as the handle: without
    # argtypes, ctypes would pass a Python int as a 32-bit C int.
    try:
        err = wait(state.slot, _SLICE)
    except BaseException:
        _abandon_in_flight(state, keepalive)
        raise
    return _finish_owned(err, state, keepalive)


def call_sync_owned_buffer(template, tensor, keepalive, state, copy_limit):
    """call_sync_owned through the C accelerator, which takes the input
    pointer from `tensor`'s buffer (or `tensor` is that address). Returns the result's DLManagedTensor
    address; or, for a host result of at most `copy_limit` bytes, a copy of
    it as (bytearray, shape), the engine's result already freed; or None,
    having done nothing, without the accelerator or when `tensor` offers no
    writable contiguous non-empty buffer."""
    fast = _fast if _fast is not None else fastcall()
    if not fast:
        return None
    if _abandoned:
        _release_finished_abandoned(c_api.lib())
    try:
        outcome = fast.run_owned(template[4], state.slot_address, template[2], tensor, state.result_address,
                                 copy_limit)
    except BaseException:
        _abandon_in_flight(state, keepalive)
        raise
    if type(outcome) is int or (type(outcome) is tuple and len(outcome) == 2):
        return outcome
    if outcome is False:
        return None
    return _finish_owned(outcome[0], state, keepalive)


def _finish_owned(err, state, keepalive):
    """After an allocating collective was enqueued and waited for one slice
    (`err`: what the wait returned), or failed before that (the slot empty):
    waits out the rest, takes the result's address and releases the handle."""
    library = c_api.lib()
    slot = state.slot
    if not slot.value:
        c_api.check(err)
        raise HorovodInternalError("the finished collective returned no result")
    _, _, get_result, release = _owned_calls or _raw_owned_calls()
    try:
        if err and library.hvd_error_get_code(err) == c_api.ERROR_TIMEOUT:
            library.hvd_error_destroy(err)
            err = _wait(library, slot.value)
    except BaseException:
        _abandon_in_flight(state, keepalive)
        raise
    try:
        if err:
            c_api.check(err)
        state.result.tensor_index = 0
        err = get_result(slot, state.result_ref)
        if err:
            c_api.check(err)
        managed = state.result_output.value
        if not managed:  # never for allgather or reducescatter; read_owned must not be given 0
            raise HorovodInternalError("the finished collective returned no result")
        return managed
    finally:
        release(slot)
        slot.value = None


def result(handle, index=0):
    """The hvd_result of tensor `index` of a completed handle."""
    res = c_api.Result(struct_size=ctypes.sizeof(c_api.Result), tensor_index=index)
    c_api.check(c_api.lib().hvd_handle_get_result(handle, ctypes.byref(res)))
    return res


def owned_address(res):
    """The address of the DLManagedTensor of an hvd_result's core-allocated
    output (0 for none): what the functions below take."""
    return ctypes.cast(res.output, ctypes.c_void_p).value or 0


# A DLManagedTensor on LP64: the DLTensor (_DLTENSOR), manager_ctx, deleter.
_MANAGED = struct.Struct(_DLTENSOR.format + "QQ")
_MANAGED_AT = (ctypes.c_char * _MANAGED.size).from_address  # a view, for unpack_from: no copy
_SHAPES = {}  # ndim -> (Struct of that many int64, from_address of a view of them)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_deleters = {}  # deleter address -> callable (one per library that allocates results)


def read_owned(managed):
    """(data address, shape, byte count, DLPack device type, deleter address)
    of the core-allocated result at `managed`: one read of the header instead
    of a ctypes object per field."""
    (data, device_type, _, ndim, _, bits, lanes, shape_at, _, byte_offset, _,
     deleter) = _MANAGED.unpack_from(_MANAGED_AT(managed))
    shape = ()
    if ndim:
        layout = _SHAPES.get(ndim)
        if layout is None:
            layout = _SHAPES[ndim] = (struct.Struct("<%dq" % ndim), (ctypes.c_int64 * ndim).from_address)
        shape = layout[0].unpack_from(layout[1](shape_at))
    count = 1
    for extent in shape:
        count *= extent
    return data + byte_offset, shape, count * ((bits * lanes + 7) // 8), device_type, deleter


def free_owned(managed, deleter):
    """Frees the core-allocated result at `managed` with its deleter (an address, from read_owned)."""
    function = _deleters.get(deleter)
    if function is None:
        function = _deleters[deleter] = _DELETER(deleter)
    function(managed)


def copy_owned_result(managed, allocate):
    """Copies the host-memory result the core allocated (at `managed`) into
    an array of the caller's framework, then frees the core's copy.

    `allocate(shape)` returns a new contiguous array of the result's dtype and
    its data address; that array is returned.
    """
    data, shape, nbytes, _, deleter = read_owned(managed)
    out, address = allocate(shape)
    if nbytes:
        ctypes.memmove(address, data, nbytes)
    free_owned(managed, deleter)
    return out


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_PyCapsule_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The capsule keeps a pointer to its name: a module constant outlives every capsule.
_DLTENSOR_NAME = b"dltensor"


def adopt_owned_result(managed, from_dlpack, allocate):
    """The host-memory result the core allocated (at `managed`) as an array
    of the caller's framework over the same memory, without a copy.

    `from_dlpack(capsule)` turns a DLPack "dltensor" capsule into the
    framework's array; the framework then owns the memory and calls the
    result's deleter when the array (and every view of it) is gone. A large
    allgather or alltoall result is thereby written once, by the transport,
    instead of being copied into a second fresh allocation (whose page faults
    cost as much as the copy). Should the importer refuse the capsule without
    taking it, a host result is copied with `copy_owned_result(managed, allocate)`.
    """
    capsule = _PyCapsule_New(managed, _DLTENSOR_NAME, None)
    try:
        return from_dlpack(capsule)
    except (TypeError, ValueError, BufferError, RuntimeError):
        # A consumed capsule is renamed "used_dltensor": the importer owns the
        # memory then, and its error is the caller's to see.
        if not _PyCapsule_IsValid(capsule, _DLTENSOR_NAME) or read_owned(managed)[3] != c_api.kDLCPU:
            raise
        return copy_owned_result(managed, allocate)


class OwnedResultMemory:
    """A core-allocated host result's bytes (at `address`, from read_owned),
    seen through the array interface protocol: a flat, writable uint8 array.
    It owns the result (`managed`) and frees it when the last array over it
    (``np.asarray``, views) is gone. numpy would mark an array imported from a
    DLPack capsule read-only, and a ctypes array type per result size would
    pile up in ctypes' type cache."""
    __slots__ = ("managed", "deleter", "__array_interface__")

    def __init__(self, managed, deleter, address, nbytes):
        self.managed = managed
        self.deleter = deleter
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}

    def __del__(self):
        free_owned(self.managed, self.deleter)


def received_splits(res):
    """The rows an alltoall received from each rank, in rank order (a list of ints)."""
    return [res.received_splits[i] for i in range(res.num_received_splits)]


class _Pending:
    __slots__ = ("c_handle", "finish", "keepalive", "names")

    def __init__(self, c_handle, finish, keepalive, names=()):
        self.c_handle = c_handle
        self.finish = finish
        self.keepalive = keepalive
        self.names = names  # (process set id, full name) reserved until synchronize


class HandleManager:
    """Integer handles (what Horovod's async functions return) for in-flight operations.

    ``finish(c_handle)`` is called by ``synchronize`` after a successful wait
    and its return value is the operation's result; the objects given to
    ``submit`` to keep stay referenced until then.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = {}
        self._names = set()
        self._ids = itertools.count(1)

    def submit(self, finish, keep, collective, inputs, names, process_set_id=0, **enqueue_args):
        """Enqueues a collective (see `enqueue`) and returns its integer handle;
        `keep` lists the objects owning the memory the engine uses until completion.

        A named operation stays in flight, for the purpose of duplicate names,
        until its handle is synchronized: a second submission under the name
        before then is a ValueError whether or not the first has finished in
        the engine meanwhile (which on a fast, idle engine it may have).
        """
        reserved = tuple((process_set_id, n) for n in names if n)
        return self._submit(finish, keep, reserved,
                            lambda: enqueue(collective, inputs, names, process_set_id, **enqueue_args))

    def submit_cached(self, finish, keep, reserved, call):
        """`submit` of an asynchronous in-place call that the C accelerator
        finds in this thread's table (remember_async_block added it): `call`
        is the argument tuple of its submit_cached, `reserved` what the call
        reserves (see submit). None, having done nothing, when the table
        does not have the call: the caller's general path then makes it."""
        def start():
            outcome = _fast.submit_cached(*call)
            if type(outcome) is tuple:
                c_api.check(outcome[0])  # the enqueue failed: raises
            return None if outcome is None else (outcome, [])
        return self._submit(finish, keep, reserved, start)

    def submit_packed(self, finish, keep, group):
        """`submit` for a PackedGroup whose addresses the caller has just set."""
        return self._submit(finish, keep, group.reserved, lambda: (_enqueue_block(group.base), []))

    def _submit(self, finish, keep, reserved, start):
        """Reserves the names, runs `start` ((c handle, keepalive), or None
        for a call it did not make: then None) and registers the handle."""
        with self._lock:
            if not self._names.isdisjoint(reserved):
                key = next(k for k in reserved if k in self._names)
                raise ValueError("Requested a collective on tensor '%s' while another one with the same name "
                                 "is in flight in process set %d (its handle has not been synchronized). "
                                 "Synchronize it first, or use a different name." % (key[1].decode(), key[0]))
            self._names.update(reserved)
        started = None
        try:
            started = start()
        finally:
            if started is None:  # raised, or did not make the call
                with self._lock:
                    self._names.difference_update(reserved)
        if started is None:
            return None
        c_handle, keepalive = started
        with self._lock:
            handle = next(self._ids)
            self._pending[handle] = _Pending(c_handle, finish, keepalive + list(keep), reserved)
        return handle

    def submit_join(self):
        """Enqueues a join of the global set; synchronize() returns the rank that joined last."""
        return self.submit(lambda h: result(h, 0).last_joined_rank, [], c_api.JOIN, [], [b""], 0, caller_waits=True)

    def submit_barrier(self, process_set_id):
        """Enqueues a barrier of the process set; synchronize() returns None."""
        return self.submit(lambda h: None, [], c_api.BARRIER, [], [b""], process_set_id, caller_waits=True)

    def _get(self, handle):
        with self._lock:
            pending = self._pending.get(handle)
        if pending is None:
            raise ValueError("Handle %r was not created or has been cleared." % (handle,))
        return pending

    def poll(self, handle):
        """Returns True if the operation behind `handle` has completed (successfully or not)."""
        return bool(c_api.lib().hvd_handle_poll(self._get(handle).c_handle))

    def synchronize(self, handle, timeout=None):
        """Waits for the operation, releases the handle and returns its result.

        Raises the operation's error (HorovodInternalError, ...) on failure.
        """
        pending = self._get(handle)
        library = c_api.lib()
        # Interrupted, the handle stays registered (its keepalive with it) for
        # a later synchronize() or for clear() at shutdown.
        err = _wait(library, pending.c_handle, None if timeout is None else float(timeout))
        if err and library.hvd_error_get_code(err) == c_api.ERROR_TIMEOUT:
            c_api.check(err)  # raises TimeoutError; the handle stays valid
        with self._lock:
            self._pending.pop(handle, None)
            self._names.difference_update(pending.names)
        try:
            c_api.check(err)
            return pending.finish(pending.c_handle)
        finally:
            library.hvd_handle_release(pending.c_handle)

    def clear(self):
        """Forgets every handle (after shutdown), releasing the engine's objects."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._names.clear()
        library = c_api.lib()
        for p in pending.values():
            library.hvd_handle_release(p.c_handle)
        _release_finished_abandoned(library, everything=True)
