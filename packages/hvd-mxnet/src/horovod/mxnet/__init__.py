# horovod/mxnet/__init__.py - the public `import horovod.mxnet as hvd` API:
# hvd-core's basics and process sets, the NDArray collectives of mpi_ops,
# and the training helpers (DistributedOptimizer, DistributedTrainer,
# broadcast_parameters, ...). Pure Python: ctypes over MXNet's C API and
# hvd-core's, nothing compiled against MXNet.
"""Horovod's MXNet API, as `import horovod.mxnet as hvd`."""

from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from horovod.mxnet.compression import Compression  # noqa: F401
from horovod.mxnet.mpi_ops import (  # noqa: F401
    Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather, allreduce, allreduce_, alltoall,
    barrier, broadcast, broadcast_, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set,
    gloo_built, gloo_enabled, grouped_allgather, grouped_allreduce, grouped_allreduce_, grouped_reducescatter, init,
    is_homogeneous, is_initialized, join, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, reducescatter, remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline)
from horovod.mxnet.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
from horovod.mxnet.optimizer import DistributedOptimizer, DistributedTrainer  # noqa: F401
