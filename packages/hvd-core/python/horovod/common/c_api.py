# c_api.py - ctypes declarations of include/hvd/c_api.h and the one error
# checker that turns every hvd_error into a Python exception. Framework
# bindings (horovod.torch, ...) use this module; nothing else loads the
# library.
"""Low-level access to libhvd_core's C ABI (see include/hvd/c_api.h)."""

import ctypes
import threading
from ctypes import (POINTER, Structure, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t,
                    c_uint8, c_uint16, c_uint64, c_void_p)

from horovod.common import config
from horovod.common.exceptions import HorovodCollectiveMismatchError, HorovodInternalError, HorovodUnsupportedError

API_MAJOR = 1
API_MINOR = 8  # this package relies on hvd_process_set_info.fast_lane_calls (1.8)

# hvd_collective
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN = range(7)
COLLECTIVE_NAMES = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier", "join")

# hvd_error_code
SUCCESS = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_NOT_INITIALIZED = 2
ERROR_PRECONDITION = 3
ERROR_INTERNAL = 4
ERROR_TIMEOUT = 5
ERROR_DUPLICATE_NAME = 6
ERROR_UNSUPPORTED = 7

# DLPack
kDLCPU = 1
kDLCUDA = 2
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool = 0, 1, 2, 4, 6


class DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor)))]


class InitArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("process_set_ranks", POINTER(c_int32)),
                ("process_set_sizes", POINTER(c_int32)), ("num_process_sets", c_size_t)]


class Topology(Structure):
    _fields_ = [("struct_size", c_size_t), ("rank", c_int32), ("size", c_int32), ("local_rank", c_int32),
                ("local_size", c_int32), ("cross_rank", c_int32), ("cross_size", c_int32),
                ("is_homogeneous", c_int32)]


class ProcessSetInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("process_set_id", c_int32), ("rank", c_int32), ("size", c_int32),
                ("ranks", POINTER(c_int32)), ("ranks_capacity", c_size_t), ("fast_lane_calls", ctypes.c_uint64),
                ("request_batches", ctypes.c_uint64)]


class GpuInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("cuda_built", c_int32), ("cuda_available", c_int32),
                ("device_count", c_int32), ("nccl_version", c_int32), ("message", ctypes.POINTER(ctypes.c_char)),
                ("message_len", c_size_t)]


# hvd_enqueue_args and hvd_tensor_args are packed by engine_calls.py (struct
# formats, checked against the header by test_packaging.py).
ENQUEUE_CALLER_WAITS = 1
ENQUEUE_ROOT_RANK_GLOBAL = 2
ENQUEUE_SCALE_FACTORS_AS_GIVEN = 8


class Result(Structure):
    _fields_ = [("struct_size", c_size_t), ("tensor_index", c_size_t), ("output", POINTER(DLManagedTensor)),
                ("received_splits", POINTER(c_int64)), ("num_received_splits", c_size_t),
                ("last_joined_rank", c_int32)]


_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    err = c_void_p  # hvd_error*
    lib.hvd_error_get_code.argtypes = [c_void_p]
    lib.hvd_error_get_code.restype = c_int
    lib.hvd_error_get_message.argtypes = [c_void_p, POINTER(c_size_t)]
    lib.hvd_error_get_message.restype = ctypes.POINTER(ctypes.c_char)
    lib.hvd_error_destroy.argtypes = [c_void_p]
    lib.hvd_error_destroy.restype = None
    lib.hvd_get_api_version.argtypes = [POINTER(c_int32), POINTER(c_int32)]
    lib.hvd_get_api_version.restype = None
    lib.hvd_get_version_string.restype = c_char_p
    lib.hvd_init.argtypes = [POINTER(InitArgs)]
    lib.hvd_init.restype = err
    lib.hvd_shutdown.argtypes = []
    lib.hvd_shutdown.restype = err
    lib.hvd_is_initialized.restype = c_int32
    lib.hvd_get_async_error.argtypes = []
    lib.hvd_get_async_error.restype = err
    lib.hvd_abort.argtypes = [c_char_p, c_size_t]
    lib.hvd_abort.restype = err
    lib.hvd_get_gpu_info.argtypes = [POINTER(GpuInfo)]
    lib.hvd_get_gpu_info.restype = err
    lib.hvd_get_topology.argtypes = [POINTER(Topology)]
    lib.hvd_get_topology.restype = err
    lib.hvd_add_process_set.argtypes = [POINTER(c_int32), c_size_t, POINTER(c_int32)]
    lib.hvd_add_process_set.restype = err
    lib.hvd_remove_process_set.argtypes = [c_int32]
    lib.hvd_remove_process_set.restype = err
    lib.hvd_get_process_set_info.argtypes = [POINTER(ProcessSetInfo)]
    lib.hvd_get_process_set_info.restype = err
    lib.hvd_get_process_set_ids.argtypes = [POINTER(c_int32), c_size_t, POINTER(c_size_t)]
    lib.hvd_get_process_set_ids.restype = err
    lib.hvd_enqueue.argtypes = [c_void_p, POINTER(c_void_p)]
    lib.hvd_enqueue.restype = err
    lib.hvd_enqueue_wait.argtypes = [c_void_p, c_double, POINTER(c_void_p)]
    lib.hvd_enqueue_wait.restype = err
    lib.hvd_handle_poll.argtypes = [c_void_p]
    lib.hvd_handle_poll.restype = c_int32
    lib.hvd_handle_wait.argtypes = [c_void_p, c_double]
    lib.hvd_handle_wait.restype = err
    lib.hvd_handle_get_result.argtypes = [c_void_p, POINTER(Result)]
    lib.hvd_handle_get_result.restype = err
    lib.hvd_handle_release.argtypes = [c_void_p]
    lib.hvd_handle_release.restype = None
    lib.hvd_start_timeline.argtypes = [c_char_p, c_size_t, c_int32]
    lib.hvd_start_timeline.restype = err
    lib.hvd_stop_timeline.argtypes = []
    lib.hvd_stop_timeline.restype = err
    lib.hvd_autotune_gradient_bucket.argtypes = [c_int64, c_int64, POINTER(c_int64), POINTER(c_int32)]
    lib.hvd_autotune_gradient_bucket.restype = err


def _offer_nccl_from_pypi():
    """Adds nvidia-nccl-cu13's (or -cu12's) library folder to HVD_NCCL_DIRS, where
    the CUDA plugin looks for libnccl.so.2 after the dynamic loader's own search."""
    import importlib.util
    import os
    dirs = [d for d in os.environ.get("HVD_NCCL_DIRS", "").split(os.pathsep) if d]
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(location, "lib")
        if os.path.exists(os.path.join(folder, "libnccl.so.2")) and folder not in dirs:
            dirs.append(folder)
    if dirs:
        os.environ["HVD_NCCL_DIRS"] = os.pathsep.join(dirs)


def lib():
    """The loaded libhvd_core (loaded on first use), with every function declared."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                loaded = ctypes.CDLL(config.get_library_path(), mode=ctypes.RTLD_LOCAL)
                _declare(loaded)
                major, minor = c_int32(), c_int32()
                loaded.hvd_get_api_version(ctypes.byref(major), ctypes.byref(minor))
                if major.value != API_MAJOR or minor.value < API_MINOR:
                    raise ImportError("libhvd_core at %s speaks C ABI %d.%d, but this Python package needs %d.%d "
                                      "or a later %d.x; reinstall hvd-core" % (
                                          config.get_library_path(), major.value, minor.value, API_MAJOR,
                                          API_MINOR, API_MAJOR))
                _lib = loaded
    return _lib


_gpu_info = None


def gpu_info():
    """What hvd-core can do with CUDA tensors, as a dict: cuda_built (the CUDA
    plugin is installed), cuda_available (a GPU is usable), device_count,
    nccl_version (0: no NCCL) and message (what was found, or why not).
    Loads the plugin and NCCL on the first call; needs no hvd.init()."""
    global _gpu_info
    if _gpu_info is None:
        _offer_nccl_from_pypi()  # before the first question loads NCCL
        info = GpuInfo(struct_size=ctypes.sizeof(GpuInfo))
        check(lib().hvd_get_gpu_info(ctypes.byref(info)))
        _gpu_info = {"cuda_built": bool(info.cuda_built), "cuda_available": bool(info.cuda_available),
                     "device_count": info.device_count, "nccl_version": info.nccl_version,
                     "message": ctypes.string_at(info.message, info.message_len).decode("utf-8", "replace")}
    return dict(_gpu_info)


def error_to_exception(code, message):
    """The Python exception for an hvd_error code (Horovod's classes)."""
    if code == ERROR_INTERNAL:
        return HorovodInternalError(message)
    if code == ERROR_PRECONDITION:
        return HorovodCollectiveMismatchError(message)
    if code == ERROR_TIMEOUT:
        return TimeoutError(message)
    if code == ERROR_UNSUPPORTED:
        return HorovodUnsupportedError(message)
    return ValueError(message)  # invalid argument, not initialized, duplicate name


def check(error):
    """Raises the exception for a non-NULL hvd_error* (and frees it)."""
    if not error:
        return
    library = lib()
    try:
        code = library.hvd_error_get_code(error)
        length = c_size_t()
        raw = library.hvd_error_get_message(error, ctypes.byref(length))
        message = ctypes.string_at(raw, length.value).decode("utf-8", "replace")
    finally:
        library.hvd_error_destroy(error)
    raise error_to_exception(code, message)
