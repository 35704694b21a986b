# horovod/common/__init__.py - hvd-core's Python API. Framework bindings
# build on the modules of this package; code without a framework can use it
# directly: `import horovod.common as hvd; hvd.init(); hvd.allreduce(array)`.
"""hvd-core: Horovod's basics and collectives on numpy arrays, the C ABI's
location for native builds, and the rendezvous store."""

from horovod.common.basics import Adasum, Average, HorovodBasics, Max, Min, Product, Sum
from horovod.common.collectives import (allgather, allgather_async, allgather_object, allreduce, allreduce_,
                                        allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                                        broadcast, broadcast_, broadcast_async, broadcast_async_,
                                        broadcast_object, grouped_allgather, grouped_allgather_async,
                                        grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                        grouped_allreduce_async_, grouped_reducescatter,
                                        grouped_reducescatter_async, join, poll, reducescatter,
                                        reducescatter_async, synchronize)
from horovod.common.config import get_cmake_dir, get_include_dir, get_library_path
from horovod.common.exceptions import (HorovodCollectiveMismatchError, HorovodInternalError,
                                       HorovodUnsupportedError, HostsUpdatedInterrupt)
from horovod.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

_basics = HorovodBasics()
_basics.add_shutdown_callback(lambda: __import__("horovod.common.collectives", fromlist=["_clear_handles"])
                              ._clear_handles())

init = _basics.init
shutdown = _basics.shutdown
is_initialized = _basics.is_initialized
start_timeline = _basics.start_timeline
stop_timeline = _basics.stop_timeline
size = _basics.size
local_size = _basics.local_size
cross_size = _basics.cross_size
rank = _basics.rank
local_rank = _basics.local_rank
cross_rank = _basics.cross_rank
is_homogeneous = _basics.is_homogeneous
mpi_threads_supported = _basics.mpi_threads_supported
mpi_enabled = _basics.mpi_enabled
mpi_built = _basics.mpi_built
gloo_enabled = _basics.gloo_enabled
gloo_built = _basics.gloo_built
nccl_built = _basics.nccl_built
ddl_built = _basics.ddl_built
ccl_built = _basics.ccl_built
cuda_built = _basics.cuda_built
rocm_built = _basics.rocm_built
