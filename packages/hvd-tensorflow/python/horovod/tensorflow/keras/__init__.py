# tensorflow/keras/__init__.py - horovod.tensorflow.keras: Horovod's Keras
# API for whatever tf.keras resolves to - Keras 3 by default, tf-keras
# (legacy Keras 2) when TF_USE_LEGACY_KERAS=1. The implementation lives in
# horovod._keras, shared with horovod.keras.
"""Horovod's Keras API for ``tf.keras`` (Keras 3, or tf-keras with TF_USE_LEGACY_KERAS=1)."""

import tensorflow as tf

from horovod.tensorflow.compression import Compression  # noqa: F401
from horovod.tensorflow.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product,  # noqa: F401
                                        ProcessSet, Sum, add_process_set, ccl_built, cross_rank, cross_size,
                                        cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled,
                                        init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                                        mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set,
                                        rocm_built, shutdown, size, start_timeline, stop_timeline)
from horovod._keras.api import make_api, publish

# tf.keras is a lazy module; resolving it here picks Keras 3 or tf-keras
# exactly as the user's own `tf.keras` does.
keras = tf.keras

# DistributedOptimizer, PartialDistributedOptimizer, broadcast_global_variables,
# allreduce, allgather, broadcast, reducescatter, load_model
publish(globals(), make_api(keras))

from horovod.tensorflow.keras import callbacks, elastic  # noqa: E402,F401  (need `keras` above)
