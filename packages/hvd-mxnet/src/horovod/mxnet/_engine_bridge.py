# _engine_bridge.py - where MXNet's dependency engine meets hvd-core's C ABI,
# in pure Python: ctypes over libmxnet's C API (MXEnginePushAsyncND,
# MXNDArrayGetData) and over hvd-core's (hvd_enqueue with a completion
# callback). An operation pushed here reads its const arrays and writes its
# mutable ones in MXNet's order: it starts after their last writer and
# readers of its outputs wait for it. Its body only enqueues to hvd-core and
# returns, so MXNet's worker threads never block on other ranks; hvd-core's
# completion callback hands the finished operation to one Python thread,
# which tells MXNet it is done - with an error when hvd-core reported one,
# which MXNet then raises from the next wait on the outputs (wait_to_read,
# asnumpy, ...) as MXNetError.
#
# MXNet's NaiveEngine (MXNET_ENGINE_TYPE=NaiveEngine) runs every operation in
# the pushing thread and returns from the push only once the operation has
# told it it is done, but drops the error it was told: there the failure is
# raised from push() itself, at the call, as NaiveEngine raises its own
# operators' failures. run_and_wait() is the blocking form for collectives
# whose result shape only the negotiation tells (allgather, alltoall,
# reducescatter): pushed like the others, then waited for, its hvd handle
# kept for the caller to read the results from.
"""The MXNet engine <-> hvd-core bridge behind horovod.mxnet's collectives."""

import ctypes
import itertools
import os
import queue
import threading

import numpy as np
from mxnet.base import _LIB, MXNetError, check_call
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP

from horovod.common import c_api
from horovod.common.engine_calls import TensorDesc, enqueue

# void (*EngineAsyncFunc)(RunContext*, CallbackOnComplete*, void* param)
_ENGINE_ASYNC_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
# The function inside engine::CallbackOnComplete: (Engine*, void* param, const dmlc::Error*)
_ENGINE_ON_COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
# hvd_done_fn: (void* ctx, hvd_handle*)
_HVD_DONE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

# mxnet::FnProperty::kCPUPrioritized: MXNet runs these on its own CPU worker
# pool ordered by `priority` (Horovod's binding pushes its operations so too).
_FN_PROPERTY_CPU_PRIORITIZED = ctypes.c_int(3)
# mxnet::Context {DeviceType dev_type; int32 dev_id;} for cpu(0).
_CPU_CONTEXT = (ctypes.c_int32 * 2)(1, 0)

# MXNet's bfloat16 (its type flag 12): numpy has none, so NDArray.dtype is
# this structured stand-in, [('bfloat16', '<u2')].
BFLOAT16 = np.dtype(_DTYPE_MX_TO_NP[12])

# numpy dtype of an NDArray -> DLPack (code, bits): every MXNet dtype hvd-core reduces.
DLPACK_TYPES = {
    np.dtype(np.uint8): (c_api.kDLUInt, 8), np.dtype(np.int8): (c_api.kDLInt, 8),
    np.dtype(np.int32): (c_api.kDLInt, 32), np.dtype(np.int64): (c_api.kDLInt, 64),
    np.dtype(np.float16): (c_api.kDLFloat, 16), BFLOAT16: (c_api.kDLBfloat, 16),
    np.dtype(np.float32): (c_api.kDLFloat, 32), np.dtype(np.float64): (c_api.kDLFloat, 64),
    np.dtype(np.bool_): (c_api.kDLBool, 8),
}


def dtype_name(dtype):
    """A dtype's name as users write it ('bfloat16', not numpy's 'void16')."""
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype == BFLOAT16 else dtype.name


class _StdRuntimeError:
    """A std::runtime_error built in memory we own, for MXNet's on_complete.

    MXNet 1.9's engine takes an operation's failure as a `const dmlc::Error*`
    and keeps a copy of it (dmlc::Error adds nothing to std::runtime_error, so
    the copy needs only the base's layout); the copy is rethrown from the next
    wait on the operation's outputs. libstdc++ exports the constructor and the
    destructor, so the object is made and ended through them.
    """

    _SIZE = 64  # sizeof(std::runtime_error) is 16 on LP64; room to spare
    _lib = None

    def __init__(self, message):
        cls = type(self)
        if cls._lib is None:
            lib = ctypes.CDLL("libstdc++.so.6")
            lib._ZNSt13runtime_errorC2EPKc.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            lib._ZNSt13runtime_errorD2Ev.argtypes = [ctypes.c_void_p]
            cls._lib = lib
        self._buf = ctypes.create_string_buffer(self._SIZE)
        self.address = ctypes.addressof(self._buf)
        cls._lib._ZNSt13runtime_errorC2EPKc(self.address, message.encode("utf-8", "replace"))

    def destroy(self):
        type(self)._lib._ZNSt13runtime_errorD2Ev(self.address)


def data_pointer(ndarray):
    """The address of `ndarray`'s memory (its first element)."""
    ptr = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(ndarray.handle, ctypes.byref(ptr)))
    return ptr.value or 0


def check_supported(ndarray, what="tensor"):
    """Raises Horovod's ValueError for arrays the engine cannot take."""
    import mxnet as mx
    if not isinstance(ndarray, mx.nd.NDArray):
        raise ValueError("%s must be an mxnet.nd.NDArray, got %s" % (what, type(ndarray).__name__))
    if np.dtype(ndarray.dtype) not in DLPACK_TYPES:
        raise ValueError("Tensor type %s is not supported." % dtype_name(ndarray.dtype))
    if ndarray.stype != "default":
        raise ValueError("%s has storage type %s: only dense NDArrays are supported; convert it with "
                         "tostype('default')" % (what, ndarray.stype))
    if ndarray.context.device_type != "cpu":
        raise ValueError("%s is on %s: this build of horovod.mxnet reduces CPU NDArrays only; copy it with "
                         "as_in_context(mx.cpu())" % (what, ndarray.context))


def describe(ndarray):
    """The TensorDesc of a CPU NDArray (call only where its memory is ready: inside a pushed op)."""
    return TensorDesc(data_pointer(ndarray), ndarray.shape, *DLPACK_TYPES[np.dtype(ndarray.dtype)])


class _Operation:
    __slots__ = ("op_id", "body", "keep", "on_complete", "handle", "keep_handle", "failure")

    def __init__(self, op_id, body, keep, keep_handle=False):
        self.op_id = op_id
        self.body = body
        self.keep = keep
        self.on_complete = None
        self.handle = None
        # run_and_wait(): the finished hvd handle stays open for the caller,
        # and a failure is the caller's to raise, not MXNet's.
        self.keep_handle = keep_handle
        self.failure = None  # the exception that failed the operation


_naive_engine = None


def naive_engine():
    """True when MXNet runs on its synchronous NaiveEngine (MXNET_ENGINE_TYPE, read once, as MXNet does)."""
    global _naive_engine
    if _naive_engine is None:
        _naive_engine = os.environ.get("MXNET_ENGINE_TYPE", "") == "NaiveEngine"
    return _naive_engine


_ids = itertools.count(1)
_operations = {}  # id -> _Operation, from push() until MXNet is told it is done
_lock = threading.Lock()
_finished = queue.SimpleQueue()  # (id, hvd handle) from hvd-core's callback
_completer = None


def _complete(op, failure):
    """Tells MXNet that `op` is done; `failure` (an exception) fails it."""
    op.failure = failure
    fn, engine, param = op.on_complete
    message = None if failure is None or op.keep_handle else _error_message(failure)
    if message is None:
        _ENGINE_ON_COMPLETE(fn)(engine, param, None)
        return
    error = _StdRuntimeError(message)
    try:
        _ENGINE_ON_COMPLETE(fn)(engine, param, error.address)
    finally:
        error.destroy()


def _error_message(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def _run_completions():
    library = c_api.lib()
    while True:
        op_id, handle = _finished.get()
        with _lock:
            op = _operations.pop(op_id)
        failure = None
        try:
            c_api.check(library.hvd_handle_wait(handle, -1.0))
        except Exception as e:  # noqa: BLE001 - every failure is MXNet's to raise
            failure = e
        if op.keep_handle and failure is None:
            op.handle = handle  # run_and_wait() reads the results, then releases it
        else:
            library.hvd_handle_release(handle)
        _complete(op, failure)


def _hvd_done(ctx, handle):
    # On hvd-core's engine thread: hand over and return at once.
    _finished.put((ctx, handle))


def _engine_run(run_context, on_complete, param):
    # On an MXNet worker thread, once the const arrays are written and the
    # mutable ones read by everything ordered before this operation.
    op_id = param or 0
    with _lock:
        op = _operations[op_id]
    triple = ctypes.cast(on_complete, ctypes.POINTER(ctypes.c_void_p * 3)).contents
    op.on_complete = (triple[0], triple[1], triple[2])
    try:
        op.body(_HVD_DONE_ADDRESS, op_id)
    except Exception as e:  # noqa: BLE001 - raised by the outputs' next wait instead
        with _lock:
            _operations.pop(op_id, None)
        _complete(op, e)


_engine_run_fn = _ENGINE_ASYNC_FN(_engine_run)
_hvd_done_fn = _HVD_DONE_FN(_hvd_done)
_HVD_DONE_ADDRESS = ctypes.cast(_hvd_done_fn, ctypes.c_void_p).value


def _start_completer():
    global _completer
    with _lock:
        if _completer is None:
            _completer = threading.Thread(target=_run_completions, name="horovod.mxnet completions", daemon=True)
            _completer.start()


def push(body, const_arrays, mutable_arrays, priority=0, name="horovod", keep_handle=False):
    """Pushes an operation on MXNet's engine that reads `const_arrays` and writes `mutable_arrays`.

    `body(on_done, ctx)` runs on an MXNet worker thread when the arrays are
    ready; it enqueues to hvd-core with that completion callback and context
    and returns the hvd handle. The operation is done for MXNet when hvd-core
    completes it; an exception from `body` or an hvd error fails it. On
    NaiveEngine the operation has run when this returns, and its failure is
    raised here (MXNetError).

    Returns the _Operation.
    """
    _start_completer()
    op_id = next(_ids)
    keep = (const_arrays, mutable_arrays)
    op = _Operation(op_id, body, keep, keep_handle)
    with _lock:
        _operations[op_id] = op
    const_handles = (ctypes.c_void_p * max(1, len(const_arrays)))(*[a.handle.value for a in const_arrays])
    mutable_handles = (ctypes.c_void_p * max(1, len(mutable_arrays)))(*[a.handle.value for a in mutable_arrays])
    try:
        check_call(_LIB.MXEnginePushAsyncND(
            _engine_run_fn, ctypes.c_void_p(op_id), None, _CPU_CONTEXT, const_handles, len(const_arrays),
            mutable_handles, len(mutable_arrays), ctypes.byref(_FN_PROPERTY_CPU_PRIORITIZED),
            ctypes.c_int(priority), name.encode(), ctypes.c_bool(False)))
    except BaseException:
        with _lock:
            _operations.pop(op_id, None)
        raise
    if op.failure is not None and not keep_handle and naive_engine():
        raise mxnet_error(op.failure)
    return op


def mxnet_error(failure):
    """The MXNetError that reports `failure` (an hvd error or a refused argument) to MXNet code."""
    if isinstance(failure, MXNetError):
        return failure
    if isinstance(failure, ValueError):
        return HorovodMXNetValueError(_error_message(failure))
    return MXNetError(_error_message(failure))


class HorovodMXNetValueError(MXNetError, ValueError):
    """An argument hvd-core refused (a scalar to reducescatter, splits that do
    not add up, a name already in flight, ...): MXNetError, as Horovod's
    binding raises, and also ValueError, as hvd's other bindings do."""


def run_and_wait(collective, inputs, names, process_set_id, priority=0, name="horovod", **enqueue_args):
    """Runs a collective that reads `inputs` (NDArrays) on MXNet's engine and waits for it.

    The operation is pushed like push()'s, ordered after the inputs' writers
    and by `priority`; this returns once it is done. Returns its open hvd
    handle: read the results (engine_calls.result) and then release it with
    release(). A failure is raised as MXNetError (also ValueError when hvd
    refused an argument).
    """
    import mxnet as mx
    # The engine op writes only this placeholder, whose wait is the wait for the op.
    done = mx.nd.empty((1,), ctx=inputs[0].context if inputs else mx.cpu(), dtype="uint8")

    def body(on_done, ctx):
        handle, _ = enqueue(collective, [describe(a) for a in inputs], names, process_set_id, on_done=on_done,
                            on_done_ctx=ctx, **enqueue_args)
        return handle

    op = push(body, list(inputs), [done], priority, name, keep_handle=True)
    try:
        done.wait_to_read()
    except MXNetError:
        # An input's writer failed, so MXNet skipped the operation (it never
        # fails it itself) and raises that failure: forget the operation.
        with _lock:
            _operations.pop(op.op_id, None)
        raise
    if op.failure is not None:
        raise mxnet_error(op.failure)
    return op.handle


def release(handle):
    """Releases a handle run_and_wait() returned."""
    c_api.lib().hvd_handle_release(handle)


def enqueue_in_engine(collective, inputs, outputs, names, process_set_id, reduce_op=1, root_rank=0,
                      prescale_factor=1.0, postscale_factor=1.0):
    """A push() body for allreduce and broadcast: `inputs` reduced into `outputs` (NDArrays)."""
    def body(on_done, ctx):
        ins = [describe(a) for a in inputs]
        outs = [describe(a) for a in outputs]
        handle, _ = enqueue(collective, ins, names, process_set_id, outputs=outs, reduce_op=reduce_op,
                            root_rank=root_rank, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                            on_done=on_done, on_done_ctx=ctx)
        return handle

    return body


def pending_count():
    """Operations pushed and not yet completed for MXNet."""
    with _lock:
        return len(_operations)

