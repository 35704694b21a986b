# horovod/torch/__init__.py - the public `import horovod.torch as hvd` API:
# hvd-core's basics and process sets, the collectives of mpi_ops, and the
# training helpers (DistributedOptimizer, broadcast_parameters, ...).
"""Horovod's PyTorch API, as `import horovod.torch as hvd`."""

# Refuses a missing or too old torch with a message saying what to install.
from horovod.torch._torch_version import OLDEST_TORCH  # noqa: F401
import torch
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                         remove_process_set)
from horovod.torch.compression import Compression  # noqa: F401
from horovod.torch.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodCollectiveMismatchError, Max, Min, Product, Sum,
    allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
    alltoall_async, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, ccl_built, cross_rank,
    cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, grouped_allgather, grouped_allgather_async,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter, grouped_reducescatter_async, init, is_homogeneous, is_initialized, join,
    local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll, rank,
    reducescatter, reducescatter_async, rocm_built, shutdown, size, sparse_allreduce_async, start_timeline,
    stop_timeline, synchronize)

# The training helpers live in modules that build on the collectives above.
from horovod.torch.optimizer import DistributedOptimizer  # noqa: F401,E402
from horovod.torch.functions import (allgather_object, broadcast_object,  # noqa: F401,E402
                                     broadcast_optimizer_state, broadcast_parameters)
from horovod.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401,E402
from horovod.torch import elastic  # noqa: F401,E402
# Registers the hvd:: torch.library ops that the collectives call while
# torch.compile traces; importing horovod.torch.mpi_ops always runs this first.
from horovod.torch import custom_ops  # noqa: F401,E402


def _check_has_gpu():
    """Whether CUDA tensors can be used (horovod.common.util.gpu_available asks this)."""
    return torch.cuda.is_available()
