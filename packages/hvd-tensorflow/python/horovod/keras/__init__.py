# keras/__init__.py - horovod.keras: Horovod's Keras API for standalone
# Keras 3 (`import keras`, TensorFlow backend). Same functions as
# horovod.tensorflow.keras, bound to `keras` instead of `tf.keras` (the two
# differ when TF_USE_LEGACY_KERAS=1 makes tf.keras tf-keras).
"""Horovod's Keras API for standalone Keras (``import keras``)."""

import keras

from horovod.tensorflow.compression import Compression  # noqa: F401
from horovod.tensorflow.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product,  # noqa: F401
                                        ProcessSet, Sum, add_process_set, ccl_built, cross_rank, cross_size,
                                        cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled,
                                        init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                                        mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set,
                                        rocm_built, shutdown, size, start_timeline, stop_timeline)
from horovod._keras.api import make_api

if keras.backend.backend() != "tensorflow":
    raise ImportError("horovod.keras needs Keras' TensorFlow backend (KERAS_BACKEND=tensorflow); this Keras uses %r"
                      % keras.backend.backend())

_api = make_api(keras)
for _name, _fn in _api.items():
    _fn.__module__, _fn.__qualname__ = __name__, _name

DistributedOptimizer = _api["DistributedOptimizer"]
PartialDistributedOptimizer = _api["PartialDistributedOptimizer"]
broadcast_global_variables = _api["broadcast_global_variables"]
allreduce = _api["allreduce"]
allgather = _api["allgather"]
broadcast = _api["broadcast"]
reducescatter = _api["reducescatter"]
load_model = _api["load_model"]

from horovod.keras import callbacks  # noqa: E402,F401

del _name, _fn, _api
