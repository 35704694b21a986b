# horovod/tensorflow/__init__.py - the public `import horovod.tensorflow as hvd`
# API, gathered from the modules that hold it: hvd-core's basics, process sets
# and the raw collective ops (mpi_ops, the only module that touches the op
# library); the framework-level collectives (collectives); DistributedOptimizer
# for tf.compat.v1 optimizers (optimizer); DistributedGradientTape
# (gradient_tape); variable and object broadcasts (functions); the
# tf.compat.v1 graph-mode helpers (compat_v1); SyncBatchNormalization.
"""Horovod's TensorFlow API, as `import horovod.tensorflow as hvd`."""

# Module-level names this module has always had (as Horovod's has): code
# that reaches them through horovod.tensorflow keeps working.
import os  # noqa: F401
import warnings  # noqa: F401

import tensorflow as tf  # noqa: F401

from horovod.common.util import get_average_backwards_compatibility_fun, num_rank_is_power_2, split_list  # noqa: F401
from horovod.tensorflow.compression import Compression  # noqa: F401
from horovod.tensorflow.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum, _allreduce, _grouped_allreduce,
    _grouped_reducescatter, _normalize_name, _reducescatter, add_process_set, allgather, alltoall, barrier,
    broadcast, broadcast_, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built,
    gloo_enabled, grouped_allgather, init, is_homogeneous, is_initialized, join, local_rank, local_rank_op,
    local_size, local_size_op, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, process_set_included_op,
    rank, rank_op, remove_process_set, rocm_built, shutdown, size, size_op, start_timeline, stop_timeline)
from horovod.tensorflow.collectives import (  # noqa: F401
    _allreduce_cond, _check_sparse_op, _elastic, _group_name, _grouped_allgather_by_dtype, _grouped_allreduce_cond,
    _ReduceOps, _reduction_enabled, _set_size, _split_by_dtype, allreduce, check_num_rank_power_of_2,
    grouped_allreduce, grouped_reducescatter, handle_average_backwards_compatibility, reducescatter)
from horovod.tensorflow.functions import (allgather_object, broadcast_object, broadcast_object_fn,  # noqa: F401
                                          broadcast_variables)
from horovod.tensorflow.compat_v1 import BroadcastGlobalVariablesHook, broadcast_global_variables  # noqa: F401
from horovod.tensorflow.optimizer import (  # noqa: F401
    DistributedOptimizer, _check_common_options, _DistributedAdasumOptimizer, _DistributedOptimizer, _index_groups,
    _is_keras_optimizer, _LegacyOptimizer, _make_allreduce_grads_fn, _make_cached_allreduce_grads_fn,
    _WrappedLegacyOptimizer)
from horovod.tensorflow.gradient_tape import (  # noqa: F401
    DistributedGradientTape, PartialDistributedGradientTape, _distributed_tape_class, _DistributedGradientTape,
    _tape_classes)
from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper, reduce_except_local  # noqa: F401
from horovod.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from horovod.tensorflow.util import (_as_tf_variable, _cache, _executing_eagerly, _make_subgraph,  # noqa: F401
                                     _var_ref, refs_to_vars, vars_to_refs)

try:
    from horovod.tensorflow.mpi_ops import xla_built  # noqa: F401
except ImportError:  # pragma: no cover - older op layer
    pass


def __getattr__(name):
    # `hvd.elastic` and `hvd.keras` work after a plain `import horovod.tensorflow`
    # without importing them (and Keras) up front.
    if name in ("elastic", "keras"):
        import importlib
        return importlib.import_module("horovod.tensorflow." + name)
    raise AttributeError("module 'horovod.tensorflow' has no attribute %r" % name)
