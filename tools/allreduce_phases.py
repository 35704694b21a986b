#!/usr/bin/env python3
"""hvd and Open MPI through the machine's fast and slow phases, one job at a time.

On the 2-CPU VMs this project is measured on, moving data between the two
CPUs gets 3-4x slower in spells of seconds (docs/benchmarks.md, "Fast and slow
phases of this machine"). A benchmark that runs hvd and Open MPI one after the
other can land them in different phases. This tool makes the phases visible:
each job times the same in-place float32 Sum allreduce in consecutive chunks
of calls and prints every chunk's median, so a phase change shows inside a
job, and hvd's and Open MPI's chunks can be compared phase for phase.

    python tools/allreduce_phases.py [--size 1M] [--chunks 6] [--calls 3000] [--runs 4]
                                     [--collective allgather]

Jobs alternate hvd (horovodrun, horovod.common.allreduce_) and mpi4py
(mpirun, Allreduce with MPI.IN_PLACE), P=2 or --np; skip one with --backends. With
--collective allgather, hvd's horovod.common.allgather (a new array each
call) against mpi4py's Allgather into a preallocated output; the size is the
gathered output, as in allreduce_benchmark.py.
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_benchmark import _time_loop, mpirun_command, parse_size  # noqa: E402


def chunk_medians(call, chunks, calls):
    medians = []
    for _ in range(chunks):
        times = sorted(_time_loop(call, calls))
        medians.append(times[len(times) // 2] * 1e6)
    return medians


def worker(backend, collective, size, chunks, calls):
    import numpy as np
    gather = collective == "allgather"

    def input_of(ranks):  # an allgather's size is the gathered output
        return np.ones(size // 4 // (ranks if gather else 1), np.float32)

    if backend == "hvd":
        import horovod.common as hvd
        hvd.init()
        rank = hvd.rank()
        data = input_of(hvd.size())
        if gather:
            medians = chunk_medians(lambda: hvd.allgather(data, name="phases"), chunks, calls)
        else:
            medians = chunk_medians(lambda: hvd.allreduce_(data, name="phases"), chunks, calls)
        hvd.shutdown()
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank = comm.rank
        data = input_of(comm.size)
        if gather:
            gathered = np.empty(data.size * comm.size, np.float32)
            medians = chunk_medians(lambda: comm.Allgather(data, gathered), chunks, calls)
        else:
            medians = chunk_medians(lambda: comm.Allreduce(MPI.IN_PLACE, data), chunks, calls)
    if rank == 0:
        print("RESULT " + " ".join(("%.1f" if m < 100 else "%.0f") % m for m in medians), flush=True)


def run_job(backend, args):
    worker_args = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--size", str(args.size),
                   "--chunks", str(args.chunks), "--calls", str(args.calls), "--collective", args.collective]
    if backend == "hvd":
        cmd = [sys.executable, "-m", "horovod.runner.launch", "-np", str(args.np)] + worker_args
    else:
        cmd = mpirun_command(args.np) + worker_args
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            return line.split("RESULT ", 1)[1]
    return "failed (exit %d): %s" % (out.returncode, (out.stderr or out.stdout).strip()[-300:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1M"),
                        help="bytes per rank, or gathered bytes for allgather (default 1M)")
    parser.add_argument("--collective", choices=["allreduce", "allgather"], default="allreduce")
    parser.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--chunks", type=int, default=6, help="chunks per job (default 6)")
    parser.add_argument("--calls", type=int, default=3000, help="calls per chunk (default 3000)")
    parser.add_argument("--runs", type=int, default=4, help="jobs per backend, alternated (default 4)")
    parser.add_argument("--backends", default="hvd,mpi", help="comma-separated subset of hvd,mpi")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed per job")
    parser.add_argument("--worker", choices=["hvd", "mpi"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.collective, args.size, args.chunks, args.calls)
        return
    backends = [b for b in args.backends.split(",") if b]
    what = ("allgather of %d bytes (gathered)" if args.collective == "allgather"
            else "in-place float32 Sum allreduce of %d bytes") % args.size
    print("%s, P=%d: median us of each chunk of %d calls" % (what, args.np, args.calls))
    for run in range(args.runs):
        for backend in backends:
            print("%s %-3s %s" % (time.strftime("%H:%M:%S"), backend, run_job(backend, args)), flush=True)


if __name__ == "__main__":
    main()
