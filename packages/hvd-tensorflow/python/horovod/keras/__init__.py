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
from horovod._keras.api import make_api, publish

if keras.backend.backend() != "tensorflow":
    raise ImportError("horovod.keras needs Keras' TensorFlow backend (KERAS_BACKEND=tensorflow); this Keras uses %r"
                      % keras.backend.backend())

# DistributedOptimizer, PartialDistributedOptimizer, broadcast_global_variables,
# allreduce, allgather, broadcast, reducescatter, load_model
publish(globals(), make_api(keras))

from horovod.keras import callbacks, elastic  # noqa: E402,F401
