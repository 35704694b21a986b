"""A rank of test_plain_mpirun.py, started by a plain mpirun (or as one would start it),
without horovodrun.

    python plain_mpirun_worker.py report | file-exchange | mpi4py-sets | split-sets

Each program prints one line "REPORT {json}" in a single write(2) below PIPE_BUF, as
MPICH's ranks share one stdout pipe. report: ids, host, the store's address, an
allreduce and an allgather, and an allreduce after a re-init. file-exchange: the mode
of the private file ranks met through (rank 0) and an allreduce. mpi4py-sets: process
sets made from mpi4py communicators. split-sets: process sets from split communicators
given to init(comm=, process_sets=), with the error Horovod gives for a repeated set.
"""

import json
import os
import socket
import stat
import sys

import numpy as np

import horovod.common as hvd


def _report(out):
    # Not horovod.common.testing.report: on the fake hosts this runs against
    # the hosts' installed hvd-core, which need not carry the test helpers.
    os.write(1, ("REPORT " + json.dumps(out) + "\n").encode())


def report():
    hvd.init()
    r = hvd.rank()
    out = {"rank": r, "size": hvd.size(), "host": socket.gethostname(), "local": [hvd.local_rank(), hvd.local_size()],
           "store": os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
           "sum": hvd.allreduce(np.full(3, float(r)), op=hvd.Sum).tolist(),
           "gather": hvd.allgather(np.array([r])).tolist(), "horovod_rank_set": "HOROVOD_RANK" in os.environ}
    hvd.shutdown()
    hvd.init()  # a re-init reuses what the first one learnt: no second exchange
    out["after_reinit"] = hvd.allreduce(np.ones(1), op=hvd.Sum).tolist()
    _report(out)


def file_exchange():
    from horovod.common import mpirun_bootstrap
    hvd.init()
    path = mpirun_bootstrap._exchange_file()
    mode = stat.S_IMODE(os.stat(path).st_mode) if hvd.rank() == 0 else None
    _report({"rank": hvd.rank(), "mode": mode, "sum": hvd.allreduce(np.ones(2), op=hvd.Sum).tolist()})


def mpi4py_sets():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    hvd.init(comm=world)  # a real communicator covering the job
    halves = world.Split(color=world.Get_rank() % 2, key=world.Get_rank())
    _report({"rank": hvd.rank(), "halves": hvd.ProcessSet(halves).ranks, "dup": hvd.ProcessSet(world.Dup()).ranks})


def split_sets():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    halves = world.Split(color=world.Get_rank() % 2, key=world.Get_rank())  # different ranks per process
    sets = [hvd.ProcessSet(halves), hvd.ProcessSet(world.Dup()), hvd.ProcessSet([0])]
    try:
        hvd.init(comm=world, process_sets=sets)
        error = None
    except ValueError as e:  # the Dup() is the whole job: the global set again
        error = str(e)
    mine = sets[0]
    total = hvd.allreduce(np.array([float(hvd.rank())]), op=hvd.Sum, process_set=mine).tolist()
    again = [hvd.ProcessSet(halves), hvd.ProcessSet([0])]
    hvd.init(comm=world, process_sets=again)  # running: these take the registered ids
    world.Barrier()  # no rank shuts down before the others' second init (a departure would restart them)
    _report({"rank": hvd.rank(), "error": error, "initialized": hvd.is_initialized(),
             "table": {str(k): v for k, v in hvd._basics._get_process_set_ids_and_ranks().items()},
             "ids": [ps.process_set_id for ps in sets], "again": [ps.process_set_id for ps in again], "total": total,
             "global_comm": hvd.global_process_set.mpi_comm is world})


PROGRAMS = {"report": report, "file-exchange": file_exchange, "mpi4py-sets": mpi4py_sets, "split-sets": split_sets}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]]()
