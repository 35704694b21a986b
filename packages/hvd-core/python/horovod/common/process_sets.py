# process_sets.py - ProcessSet objects and their registration, with
# Horovod's names (global_process_set, add_process_set, remove_process_set).
"""Process sets: run collectives on a subset of the ranks."""

import ctypes
import os
from typing import Any, Iterable, List, Optional, Sequence, Union

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "process_set_id_of"]

_basics = None  # the HorovodBasics that registered sets talk to


class ProcessSet:
    """A set of Horovod ranks that can run collectives among themselves.

    Pass instances to ``hvd.init(process_sets=[...])`` or register them later
    with ``hvd.add_process_set()`` (with HOROVOD_DYNAMIC_PROCESS_SETS=1), then
    give ``process_set=`` to any collective. ``global_process_set`` contains all
    ranks.

    Args:
        ranks: the ranks in the set, any iterable of ints (order does not
            matter), or an mpi4py communicator: its members, as ranks of
            MPI_COMM_WORLD (which are hvd's ranks under mpirun). A
            communicator may hold different ranks on different processes
            (one made by ``Comm.Split``): ``hvd.init()`` registers every
            distinct set the processes name.
    """

    def __init__(self, ranks: Union[Iterable[int], Any]):
        self.mpi_comm = None
        if hasattr(ranks, "Get_group"):
            self.mpi_comm = ranks
            ranks = _communicator_ranks(ranks)
        try:
            ranks = list(ranks)
        except TypeError:
            raise ValueError("ProcessSet expects integer ranks or an mpi4py communicator, got %r" % (ranks,)) from None
        if not all(isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet expects integer ranks, got %r" % (ranks,))
        self.ranks: List[int] = sorted(ranks)
        self.process_set_id: Optional[int] = None

    def _invalidate(self):
        self.process_set_id = None

    def _info(self):
        from horovod.common import c_api
        info = c_api.ProcessSetInfo(struct_size=ctypes.sizeof(c_api.ProcessSetInfo),
                                    process_set_id=self.process_set_id)
        c_api.check(c_api.lib().hvd_get_process_set_info(ctypes.byref(info)))
        return info

    def size(self) -> Optional[int]:
        """Number of ranks in the set, or None if it is not registered."""
        if self.process_set_id is None:
            return None
        return self._info().size

    def rank(self) -> Optional[int]:
        """This process's rank within the set (-1 if not included), or None if not registered."""
        if self.process_set_id is None:
            return None
        return self._info().rank

    def included(self) -> Optional[bool]:
        """Whether this process belongs to the set, or None if it is not registered."""
        if self.process_set_id is None:
            return None
        return self._info().rank >= 0

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __repr__ = __str__

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id and \
            self.ranks == other.ranks

    def __hash__(self):
        return hash((self.process_set_id, tuple(self.ranks)))


def _communicator_ranks(comm):
    from mpi4py import MPI  # only reached with an mpi4py communicator in hand
    group = comm.Get_group()
    try:
        return MPI.Group.Translate_ranks(group, list(range(group.Get_size())), MPI.COMM_WORLD.Get_group())
    finally:
        group.Free()


global_process_set = ProcessSet([])
"""The process set of every rank (id 0): what collectives use when given no process_set."""
global_process_set.process_set_id = 0


def process_set_id_of(process_set):
    """The engine id of a registered ProcessSet; ValueError when it is not one, or not registered."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a ProcessSet, got %r" % (process_set,))
    if process_set is global_process_set:
        return 0  # before hvd.init() too: the engine then says it is not initialised
    if process_set.process_set_id is None:
        raise ValueError("%s is not registered; pass it to hvd.init(process_sets=...) or "
                         "hvd.add_process_set()" % process_set)
    return process_set.process_set_id


def _setup(basics):
    global _basics
    _basics = basics


# The sets this process registered, in order, so that an elastic reset can
# register them again on the new engine: those given to hvd.init() (static)
# and those added since (dynamic; removed ones are forgotten).
_static_sets: List["ProcessSet"] = []
_dynamic_sets: List["ProcessSet"] = []


def _job_size_from_environment():
    """The job's size as the engine will read it, before it starts (1 without a launcher)."""
    for variable in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        value = os.environ.get(variable, "").strip()
        if value.isdigit():
            return int(value)
    return 1


def _distinct_rank_lists(process_sets, size, comm=None):
    """The rank lists to register at start-up for `process_sets`: each distinct one once,
    without the whole job (the global set). Sets made from communicators may differ between
    processes, so then every process's lists are gathered over MPI (collective: every
    process passes such sets, as with Horovod) and taken position by position, rank by rank."""
    local = [list(ps.ranks) for ps in process_sets]
    if any(ps.mpi_comm is not None for ps in process_sets):
        from mpi4py import MPI
        exchange = comm if hasattr(comm, "allgather") else MPI.COMM_WORLD
        gathered = exchange.allgather(local)
    else:
        gathered = [local]
    whole_job = list(range(size))
    distinct = []
    for position in range(max((len(lists) for lists in gathered), default=0)):
        for lists in gathered:
            if position < len(lists) and lists[position] != whole_job and lists[position] not in distinct:
                distinct.append(lists[position])
    return distinct


def _on_init(size, process_sets):
    """Called by HorovodBasics.init once the engine runs: gives each of `process_sets` the id
    of the registered set with its ranks (the whole job is the global set). Returns the
    positions of the sets that repeat an earlier one or the global set (left unregistered,
    as Horovod does), and of sets with ranks no registered set has."""
    global_process_set.ranks = list(range(size))
    global_process_set.process_set_id = 0
    id_of = {tuple(ranks): set_id for set_id, ranks in _basics._get_process_set_ids_and_ranks().items()}
    taken = {0}
    repeated, unknown = [], []
    for position, ps in enumerate(process_sets or []):
        set_id = id_of.get(tuple(ps.ranks))
        if set_id is None:
            ps._invalidate()
            unknown.append(position)
        elif set_id in taken:
            ps._invalidate()
            repeated.append(position)
        else:
            ps.process_set_id = set_id
            taken.add(set_id)
    return repeated, unknown


def _check_all_registered(process_sets, repeated, unknown):
    """ValueError naming the sets _on_init could not give an id."""
    problems = ["entry %d (%s) repeats an earlier entry or the global process set" % (i, process_sets[i].ranks)
                for i in repeated]
    problems += ["entry %d (%s) is not registered: the engine already runs with other sets; add it with "
                 "hvd.add_process_set() (HOROVOD_DYNAMIC_PROCESS_SETS=1)" % (i, process_sets[i].ranks)
                 for i in unknown]
    if problems:
        raise ValueError("hvd.init(process_sets=...): " + "; ".join(problems) + ". hvd runs, with the other "
                         "sets registered; those entries have no id (process sets must differ)")


def _remember_static(process_sets):
    """Called by an explicit hvd.init(process_sets=...): these sets replace any remembered."""
    global _static_sets, _dynamic_sets
    _static_sets, _dynamic_sets = list(process_sets), []


def _on_shutdown():
    # Ids belong to the engine that gave them out.
    for ps in _static_sets + _dynamic_sets:
        ps._invalidate()


def _fitting(process_sets, size):
    """The sets whose ranks all exist in a job of `size` ranks, but not all of them (those
    stand for the global set: see _alias_whole_job); the others get a warning."""
    fitting = []
    for ps in process_sets:
        if list(ps.ranks) == list(range(size)):
            continue
        if ps.ranks and ps.ranks[-1] < size:
            fitting.append(ps)
        else:
            import sys
            sys.stderr.write("hvd: %s does not fit the job's %d ranks after the elastic reset; it stays "
                             "unregistered until a reset brings enough ranks back\n" % (ps, size))
    return fitting


def _static_sets_for(size):
    """The remembered static sets that fit `size` ranks, to register at an elastic re-init."""
    return _fitting(_static_sets, size)


def _alias_whole_job(size):
    """After an elastic re-init: a remembered set that now has every rank of the job is the
    global set (the engine keeps no duplicate of it), so it takes the global set's id."""
    for ps in _static_sets + _dynamic_sets:
        if list(ps.ranks) == list(range(size)):
            ps.process_set_id = 0


def _register_dynamic_again(size):
    """After an elastic re-init: adds the remembered dynamic sets that fit, in their order.
    Every rank does the same (the lists are the same on all), and a worker that joined
    with the reset adds the same sets in its own start-up code."""
    for ps in _fitting(_dynamic_sets, size):
        _add(ps)


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Adds a new process set after ``hvd.init()`` and returns it.

    Collective over all ranks: every rank must call it, with the same ranks,
    in the same order as every other add/remove call. Requires
    HOROVOD_DYNAMIC_PROCESS_SETS=1 (or ``hvd.init(process_sets="dynamic")``).

    Raises:
        ValueError: dynamic process sets are disabled, the ranks are invalid,
            differ across ranks, or such a set exists already.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%s is already registered" % process_set)
    _add(process_set)
    if not any(ps is process_set for ps in _dynamic_sets):
        _dynamic_sets.append(process_set)
    return process_set


def _add(process_set):
    from horovod.common import c_api
    ranks = (ctypes.c_int32 * len(process_set.ranks))(*process_set.ranks)
    new_id = ctypes.c_int32()
    c_api.check(c_api.lib().hvd_add_process_set(ranks, len(process_set.ranks), ctypes.byref(new_id)))
    process_set.process_set_id = new_id.value


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a process set added earlier. Collective over all ranks.

    Returns:
        True if the set was removed, False if it was not registered.
    """
    from horovod.common import c_api
    if process_set.process_set_id is None:
        return False
    if process_set.process_set_id == 0:
        raise ValueError("the global process set cannot be removed")
    c_api.check(c_api.lib().hvd_remove_process_set(process_set.process_set_id))
    process_set._invalidate()
    _dynamic_sets[:] = [ps for ps in _dynamic_sets if ps is not process_set]
    return True
