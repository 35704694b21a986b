#!/usr/bin/env python3
# soak.py - long-running and fault-injection checks of hvd that are too slow or
# too disruptive for CI: memory and descriptor growth over many steps, ranks
# killed or frozen at random points, and the rendezvous store under a crowd of
# hostile clients. Results are recorded in docs/testing.md.
"""Soak and fault injection for hvd (numpy-level `horovod.common` API).

Subcommands (each prints a table and exits 1 when a criterion fails):

    python tools/soak.py steps  --steps 100000          # RSS/fd growth under horovodrun -np 2
    python tools/soak.py faults --trials 50             # SIGKILL/SIGSTOP at init, add_process_set, 64 MiB allreduce
    python tools/soak.py store  --clients 1000          # store under slow/malformed clients while a job starts

hvd must be importable (installed, or HVD_CORE_LIBRARY and PYTHONPATH set
for a dev build); `steps` and `store` also need the launcher
(`python -m horovod.runner`, package hvd-launch).
"""

import argparse
import hashlib
import json
import os
import random
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.abspath(__file__)


# --------------------------------------------------------------------------- helpers


def proc_status(pid="self"):
    """(RSS in KiB, threads) of a process, from /proc/<pid>/status."""
    rss = threads = 0
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


def open_fds(pid="self"):
    return len(os.listdir("/proc/%s/fd" % pid))


def table(headers, rows):
    widths = [max(len(str(x)) for x in [h] + [r[i] for r in rows]) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    print(line(headers))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    sys.stdout.flush()


def launcher_env(extra=None):
    """This process's environment without any job's HOROVOD_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def raise_fd_limit(wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def hvd_entries(directory, prefix):
    """Names in `directory` that hvd makes (other programs on the machine may come and go)."""
    try:
        return {n for n in os.listdir(directory) if n.startswith(prefix)}
    except FileNotFoundError:
        return set()


def job_shm_names(secret, size, max_set_id=1000):
    """The /dev/shm names a job with `secret` can make: arenas and control rings of sets 0..max_set_id.

    As the engine derives them (engine.cc, shm_communicator.cc, shm_ring.cc),
    so that what other jobs on a shared machine leave meanwhile is told
    apart from what this job leaves.
    """
    prefix = hashlib.sha256(secret.encode()).hexdigest()[:16] + "/g0/ps"
    names = set()
    for set_id in range(max_set_id + 1):
        key = prefix + str(set_id)
        names.add("hvd-" + hashlib.sha256(key.encode()).hexdigest()[:40])
        for member in range(1, size):
            names.add("hvd-r" + hashlib.sha256(("%s/ctrl/%d" % (key, member)).encode()).hexdigest()[:40])
    return names


# --------------------------------------------------------------------------- steps

# 100 tensors of mixed sizes (float32 elements): mostly small, as a model's
# biases and norms are, some of 64 Ki elements (256 KiB).
STEP_TENSOR_ELEMENTS = [1, 7, 64, 300, 1024, 4096, 16384, 65536] * 12 + [3, 129, 5000, 65536]


def steps_worker(args):
    import numpy as np

    import horovod.common as hvd

    hvd.init()
    rank = hvd.rank()
    tensors = [np.full(n, rank + 1, dtype=np.float32) for n in STEP_TENSOR_ELEMENTS]
    gather_in = np.arange(3 + rank, dtype=np.float64)
    bcast = np.zeros(257, dtype=np.int32)
    samples = []
    start = time.monotonic()
    every = max(1, args.sample_every)
    for step in range(args.steps + 1):
        if step % every == 0 or step == args.steps:
            rss, threads = proc_status()
            samples.append({"step": step, "rss_kib": rss, "fds": open_fds(), "threads": threads,
                            "t": round(time.monotonic() - start, 3)})
        if step == args.steps:
            break
        handles = [hvd.allreduce_async_(t, name="soak.t%d" % i, op=hvd.Sum) for i, t in enumerate(tensors)]
        if args.extras_every and step % args.extras_every == 0:
            handles.append(hvd.allgather_async(gather_in, name="soak.gather"))
            bcast[:] = rank
            handles.append(hvd.broadcast_async_(bcast, root_rank=0, name="soak.bcast"))
        for h in handles:
            hvd.synchronize(h)
        if step == 0:
            # every element is 1 + 2 = 3 after the first step; later steps grow it, so check once
            bad = [i for i, t in enumerate(tensors) if not np.all(t == 3)]
            if bad:
                raise SystemExit("rank %d: wrong allreduce result for tensors %s" % (rank, bad[:5]))
        for t in tensors:
            t.fill(rank + 1)  # keep values small and finite
    hvd.shutdown()
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump(samples, f)


def growth(first, last):
    return (last - first) / first if first else 0.0


def steps_main(args):
    out = tempfile.mkdtemp(prefix="soak-steps-")
    cmd = [sys.executable, "-m", "horovod.runner", "-np", "2", sys.executable, HERE, "_steps-worker",
           "--steps", str(args.steps), "--sample-every", str(args.sample_every or max(1, args.steps // 100)),
           "--out", out, "--extras-every", str(args.extras_every)]
    print("command: " + " ".join(cmd[1:]))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=launcher_env(), capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        print("job failed (exit %d) after %.1f s\n--- stdout\n%s\n--- stderr\n%s"
              % (proc.returncode, elapsed, proc.stdout[-4000:], proc.stderr[-4000:]))
        return 1
    rows, failed = [], False
    for rank in range(2):
        with open(os.path.join(out, "rank%d.json" % rank)) as f:
            samples = json.load(f)
        warm_step = int(args.steps * args.warmup)
        warm = next(s for s in samples if s["step"] >= warm_step)
        last = samples[-1]
        peak_rss = max(s["rss_kib"] for s in samples if s["step"] >= warm["step"])
        for what, key in (("RSS KiB", "rss_kib"), ("open fds", "fds"), ("threads", "threads")):
            g = growth(warm[key], last[key])
            ok = g < args.max_growth
            failed |= not ok
            rows.append([rank, what, samples[0][key], "%d (step %d)" % (warm[key], warm["step"]),
                         last[key], peak_rss if key == "rss_kib" else max(s[key] for s in samples),
                         "%+.2f%%" % (100 * g), "ok" if ok else "FAIL"])
    shutil.rmtree(out, ignore_errors=True)
    extras = ("+ an allgather and a broadcast every %d steps" % args.extras_every if args.extras_every
              else "allreduce only")
    print("%d steps x %d tensors (%s) at P=2 in %.1f s (%.2f ms/step, launcher start included)"
          % (args.steps, len(STEP_TENSOR_ELEMENTS), extras, elapsed, 1000 * elapsed / max(1, args.steps)))
    table(["rank", "measure", "start", "after warm-up", "end", "peak", "growth", "< %g%%" % (100 * args.max_growth)],
          rows)
    return 1 if failed else 0


# --------------------------------------------------------------------------- faults

PHASES = ("init", "process-set", "large-allreduce")
SIGNALS = ("kill", "stop", "stop-cont")
LARGE_BYTES = 64 << 20


def faults_worker(args):
    """One rank of a fault trial: reports phases on stdout as JSON lines."""
    import numpy as np

    def say(**kv):
        kv["t"] = time.time()
        sys.stdout.write(json.dumps(kv) + "\n")
        sys.stdout.flush()

    say(event="start")
    import horovod.common as hvd
    try:
        say(event="init")
        hvd.init()
        say(event="init-done")
        # Every loop runs until rank 0 has spent --phase-seconds in it: rank 0's
        # vote to stop travels in an allreduce, so all ranks stop together.
        flag = np.zeros(1, dtype=np.float32)

        def another_round(started):
            flag[0] = 1.0 if hvd.rank() == 0 and time.monotonic() - started > args.phase_seconds else 0.0
            hvd.allreduce_(flag, name="f.flag", op=hvd.Sum)
            return flag[0] == 0

        small = np.ones(16, dtype=np.float32)
        hvd.barrier()
        say(event="phase")
        started = time.monotonic()
        if args.phase == "init":
            while another_round(started):
                hvd.allreduce_(small, name="f.small", op=hvd.Sum)
        elif args.phase == "process-set":
            # a set without the last rank (all ranks together are the global set already)
            members = list(range(max(1, hvd.size() - 1)))
            while another_round(started):
                ps = hvd.add_process_set(members)
                if hvd.rank() in members:
                    hvd.allreduce_(small, name="f.ps", op=hvd.Sum, process_set=ps)
                hvd.remove_process_set(ps)
        else:
            big = np.ones(LARGE_BYTES // 4, dtype=np.float32)
            while another_round(started):
                hvd.allreduce_(big, name="f.large", op=hvd.Average)
        say(event="done")
        hvd.shutdown()
    except Exception as e:  # noqa: BLE001 - every error is reported, the parent judges it
        say(event="raised", type=type(e).__name__, message=str(e)[:300])
        sys.exit(3)


class Rank:
    def __init__(self, rank, proc):
        self.rank, self.proc = rank, proc
        self.events = {}
        self.buf = b""
        self.lines = []

    def pump(self):
        """Reads what is available from the rank's stdout (non-blocking)."""
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.buf += chunk
        *complete, self.buf = self.buf.split(b"\n")
        for line in complete:
            self.lines.append(line.decode(errors="replace"))
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.events.setdefault(ev.get("event"), ev)


def run_fault_trial(trial, phase, how, size, victim, delay, args):
    from horovod.common.rendezvous import RendezvousServer, make_secret

    # every trial is its own job with its own store, as under horovodrun
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    server_port = server.start()
    try:
        return _fault_trial(trial, phase, how, size, victim, delay, args, server_port, secret)
    finally:
        server.stop()


def _fault_trial(trial, phase, how, size, victim, delay, args, server_port, secret):
    from horovod.common import testing

    tmpdir = tempfile.mkdtemp(prefix="soak-fault-tmp-")
    # hvd's names: shared-memory arenas and rings "/hvd-<hash>", "/hvd-r<hash>";
    # the MPI-less address file $TMPDIR/hvd-mpirun-*.json (TMPDIR is private here)
    shm_before = hvd_entries("/dev/shm", "hvd-")
    tmp_before = hvd_entries("/tmp", "hvd-mpirun-")
    extra = {"HOROVOD_PEER_TIMEOUT_SECONDS": str(args.peer_timeout),
             "HOROVOD_GLOO_TIMEOUT_SECONDS": str(args.start_timeout),
             "HOROVOD_DYNAMIC_PROCESS_SETS": "1", "TMPDIR": tmpdir,
             "HOROVOD_STALL_CHECK_DISABLE": "1"}
    ranks = []
    for r in range(size):
        env = testing.rank_env(r, size, server_port, secret, extra=extra)
        proc = subprocess.Popen([sys.executable, HERE, "_faults-worker", "--phase", phase,
                                 "--phase-seconds", str(args.phase_seconds)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ranks.append(Rank(r, proc))
    v = ranks[victim]
    trigger = "init" if phase == "init" else "phase"
    # the signal goes `delay` s after the victim reports the phase's start
    result = {"trial": trial, "phase": phase, "signal": how, "victim": victim, "delay": round(delay, 3),
              "ok": True, "notes": []}
    deadline = time.monotonic() + args.start_timeout + 30
    while trigger not in v.events:
        for rk in ranks:
            rk.pump()
        if v.proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    if trigger not in v.events:
        result["ok"] = False
        result["notes"].append("victim never reached %s (exit %s)" % (trigger, v.proc.poll()))
    time.sleep(delay)
    for rk in ranks:
        rk.pump()
    result["victim_state"] = ("done" if "done" in v.events else
                              "in phase" if trigger in v.events and (phase != "init" or "init-done" not in v.events)
                              else "after init")
    sent_at, sent_wall = time.monotonic(), time.time()
    if "init-done" in v.events:
        result["victim_init_s"] = round(v.events["init-done"]["t"] - v.events["init"]["t"], 3)
    if how == "kill":
        v.proc.send_signal(signal.SIGKILL)
    else:
        v.proc.send_signal(signal.SIGSTOP)
    if how == "stop-cont":
        time.sleep(args.short_stop)
        v.proc.send_signal(signal.SIGCONT)
    # Survivors (and, for stop-cont, everyone) must end: raising when a peer died
    # or froze, finishing when the victim only paused.
    # Start-up waits for late peers up to the start-up timeout; creating a
    # set after init gives up as soon as the global set has lost a peer, so
    # it is bound by the peer timeout like a collective.
    bound = (args.start_timeout if phase == "init" else args.peer_timeout) + args.margin
    survivors = [rk for rk in ranks if rk is not v] if how != "stop-cont" else ranks
    end_by = sent_at + bound + (args.short_stop if how == "stop-cont" else 0)
    ended_at = {}
    while time.monotonic() < end_by + 60 and len(ended_at) < len(survivors):
        for rk in survivors:
            rk.pump()
            if rk.rank not in ended_at and rk.proc.poll() is not None:
                ended_at[rk.rank] = time.monotonic() - sent_at
        time.sleep(0.01)
    result["survivor_s"] = max(ended_at.values()) if ended_at else None
    for rk in survivors:
        rk.pump()
        if rk.rank not in ended_at:
            result["ok"] = False
            result["notes"].append("rank %d still running %.0f s after the signal" % (rk.rank, end_by + 60 - sent_at))
            rk.proc.kill()
            continue
        if ended_at[rk.rank] > bound + (args.short_stop if how == "stop-cont" else 0):
            result["ok"] = False
            result["notes"].append("rank %d ended %.1f s after the signal (bound %.1f s)"
                                   % (rk.rank, ended_at[rk.rank], bound))
        raised = rk.events.get("raised")
        if raised and raised["t"] < sent_wall and how != "stop-cont":
            result["ok"] = False
            result["notes"].append("rank %d raised before the signal: %s" % (rk.rank, raised["message"][:200]))
        if how == "stop-cont":
            if rk.proc.returncode != 0:
                result["ok"] = False
                result["notes"].append("rank %d failed after a %.1f s pause of rank %d: %s"
                                       % (rk.rank, args.short_stop, victim, raised or rk.proc.returncode))
        elif "done" in rk.events and result["victim_state"] == "done":
            result["notes"].append("signal came after the phase")
        elif raised is None or raised["type"] not in ("HorovodInternalError", "RuntimeError", "TimeoutError"):
            result["ok"] = False
            result["notes"].append("rank %d did not raise (exit %s, %s)" % (
                rk.rank, rk.proc.returncode, raised or (rk.lines[-1:] or ["no output"])[0]))
        elif raised["type"] != "HorovodInternalError":
            result["notes"].append("rank %d raised %s" % (rk.rank, raised["type"]))
        result.setdefault("messages", []).append((raised or {}).get("message", ""))
    if how == "stop":
        # the frozen victim, continued after its peers have gone, must end too
        v.proc.send_signal(signal.SIGCONT)
        try:
            v.proc.wait(timeout=bound + 10)
        except subprocess.TimeoutExpired:
            result["ok"] = False
            result["notes"].append("continued victim still running %.0f s after SIGCONT" % (bound + 10))
            v.proc.kill()
    for rk in ranks:
        try:
            rk.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            result["ok"] = False
            result["notes"].append("rank %d still running at the end of the trial" % rk.rank)
            rk.proc.kill()
            rk.proc.wait()
        rk.proc.stdout.close()
        rk.proc.stderr.close()
    # give exiting processes a moment, then compare what hvd left behind
    time.sleep(0.2)
    new_shm = hvd_entries("/dev/shm", "hvd-") - shm_before
    ours = job_shm_names(secret, size)
    left = sorted(new_shm & ours)
    if new_shm - ours:
        result["notes"].append("not this job's (another job on the machine): %s" % ", ".join(sorted(new_shm - ours)))
    left += sorted(hvd_entries("/tmp", "hvd-mpirun-") - tmp_before)
    left += ["TMPDIR:" + n for n in os.listdir(tmpdir)]
    shutil.rmtree(tmpdir, ignore_errors=True)
    if left:
        result["ok"] = False
        result["notes"].append("left behind: %s" % ", ".join(left))
        result["left"] = left
    return result


def faults_main(args):
    rng = random.Random(args.seed)
    results = []
    for trial in range(args.trials):
        phase = args.phases[trial % len(args.phases)] if args.round_robin else rng.choice(args.phases)
        how = rng.choice(args.signals)
        size = rng.choice(args.sizes)
        if args.victims:
            victim = rng.choice([v for v in args.victims if v < size] or range(size))
        else:
            victim = rng.randrange(size)
        delay = rng.uniform(0, args.max_delay or {"init": 0.15, "process-set": 2.5, "large-allreduce": 2.5}[phase])
        t0 = time.monotonic()
        r = run_fault_trial(trial, phase, how, size, victim, delay, args)
        r["size"] = size
        r["wall_s"] = time.monotonic() - t0
        results.append(r)
        print("trial %2d: P=%d %-15s %-9s victim %d after %.2f s (%s): %s, survivors ended in %s s%s" % (
            trial, size, phase, how, victim, delay, r["victim_state"], "ok" if r["ok"] else "FAIL",
            "%.2f" % r["survivor_s"] if r["survivor_s"] is not None else "-",
            ("; " + "; ".join(r["notes"])) if r["notes"] else ""))
        if args.verbose:
            print("    victim's init took %s s" % r.get("victim_init_s"))
            for m in r.get("messages", []):
                print("    raised: " + m[:240])
        sys.stdout.flush()
    rows = []
    for phase in args.phases:
        for how in args.signals:
            rs = [r for r in results if r["phase"] == phase and r["signal"] == how]
            if not rs:
                continue
            times = [r["survivor_s"] for r in rs if r["survivor_s"] is not None]
            rows.append([phase, how, len(rs), sum(r["ok"] for r in rs),
                         sum(r["victim_state"] == "in phase" for r in rs),
                         "%.2f" % max(times) if times else "-",
                         sum(bool(r.get("left")) for r in rs)])
    print("\npeer timeout %g s, start-up timeout %g s, margin %g s; bound: start-up timeout "
          "(init) or peer timeout (process-set, large-allreduce), plus margin"
          % (args.peer_timeout, args.start_timeout, args.margin))
    table(["phase", "signal", "trials", "passed", "signal inside phase", "slowest survivor end (s)",
           "left files"], rows)
    failed = [r for r in results if not r["ok"]]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("%d of %d trials passed" % (len(results) - len(failed), len(results)))
    return 1 if failed else 0


# --------------------------------------------------------------------------- store


def store_worker(args):
    import numpy as np

    import horovod.common as hvd

    t0 = time.monotonic()
    hvd.init()
    x = np.full(1024, hvd.rank() + 1, dtype=np.float32)
    hvd.allreduce_(x, name="store.x", op=hvd.Sum)
    assert np.all(x == 3), x[:4]
    hvd.shutdown()
    print(json.dumps({"rank": int(os.environ["HOROVOD_RANK"]), "init_and_allreduce_s": time.monotonic() - t0}))


def hostile_client(kind, port, stop, stats, lock, rng):
    """One hostile connection at a time, over and over, until `stop` is set."""
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError as e:
            with lock:
                stats["connect errors"] = stats.get("connect errors", 0) + 1
                stats["last connect error"] = str(e)
            stop.wait(0.5)
            continue
        try:
            s.settimeout(30)
            if kind == "slow":
                # a request a byte a second: never finishes its headers
                for b in b"GET /x HTTP/1.1\r\nHost: a\r\nX-Pad: " + b"a" * 10000:
                    if stop.is_set():
                        break
                    s.send(bytes([b]))
                    stop.wait(1.0)
            elif kind == "garbage":
                s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))) + b"\r\n\r\n")
            elif kind == "huge-headers":
                s.sendall(b"GET /k HTTP/1.1\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 8000) for i in range(200))
                          + b"\r\n")
            elif kind == "bad-signature":
                body = b"x" * 100
                s.sendall(b"PUT /v1/kv/a%%20b HTTP/1.1\r\nContent-Length: %d\r\nX-Hvd-Timestamp: %d\r\n"
                          b"X-Hvd-Nonce: abcdefgh%d\r\nX-Hvd-Signature: %s\r\nX-Hvd-Content-SHA256: %s\r\n\r\n"
                          % (len(body), int(time.time()), rng.randrange(1 << 30), b"0" * 64, b"1" * 64) + body)
            elif kind == "unauthenticated-body":
                # claims 16 MiB and sends it slowly
                s.sendall(b"PUT /v1/kv/big HTTP/1.1\r\nContent-Length: 16777216\r\n\r\n")
                for _ in range(64):
                    if stop.is_set():
                        break
                    s.sendall(b"z" * 65536)
                    stop.wait(0.2)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
            with lock:
                stats[kind] = stats.get(kind, 0) + 1
        except OSError:
            with lock:
                stats[kind + " (reset)"] = stats.get(kind + " (reset)", 0) + 1
        finally:
            s.close()


CLIENT_KINDS = ("slow", "garbage", "huge-headers", "bad-signature", "unauthenticated-body")


def client_weights(slow_fraction):
    return [slow_fraction] + [(1 - slow_fraction) / 4] * 4


def store_clients(args):
    """Runs --clients hostile clients against the store until a line arrives on stdin."""
    raise_fd_limit(2 * args.clients + 64)
    rng = random.Random(args.seed)
    stop = threading.Event()
    stats, lock = {}, threading.Lock()
    threading.stack_size(256 << 10)  # hundreds of client threads: small stacks
    clients = []
    for i in range(args.clients):
        kind = rng.choices(CLIENT_KINDS, client_weights(args.slow_fraction))[0]
        t = threading.Thread(target=hostile_client, daemon=True,
                             args=(kind, args.port, stop, stats, lock, random.Random(args.seed * 100003 + i)))
        t.start()
        clients.append(t)
    sys.stdin.readline()
    stop.set()
    for t in clients:
        t.join(timeout=0.05)
    with lock:
        print(json.dumps(stats))


def store_main(args):
    from horovod.common import rendezvous, testing
    from horovod.common.rendezvous import RendezvousServer, make_secret

    limit = raise_fd_limit(4 * args.clients + 256)
    print("open-file limit %d" % limit)
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    port = server.start()
    rss0, threads0 = proc_status()
    peak = {"rss": 0, "threads": 0}
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            rss, threads = proc_status()
            peak["rss"] = max(peak["rss"], rss)
            peak["threads"] = max(peak["threads"], threads)
            sampling.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    kinds = list(CLIENT_KINDS)
    weights = client_weights(args.slow_fraction)
    # The hostile clients run in processes of their own, so that this process's
    # RSS and threads are the store's (and the sampler's) alone.
    client_procs = []
    per_proc = -(-args.clients // args.client_processes)
    for i in range(args.client_processes):
        n = min(per_proc, args.clients - i * per_proc)
        client_procs.append(subprocess.Popen(
            [sys.executable, HERE, "_store-clients", "--port", str(port), "--clients", str(n),
             "--slow-fraction", str(args.slow_fraction), "--seed", str(args.seed + i)],
            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True))
    time.sleep(args.settle)
    rss_before_job, threads_before_job = proc_status()
    rows, failed = [], False
    for attempt in range(args.jobs):
        t0 = time.monotonic()
        procs = []
        for r in range(2):
            env = testing.rank_env(r, 2, port, secret, extra={"HVD_RENDEZVOUS_ROUND": "job%d" % attempt})
            procs.append(subprocess.Popen([sys.executable, HERE, "_store-worker"], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1, args.job_bound - (time.monotonic() - t0)) + 60))
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate())
        elapsed = time.monotonic() - t0
        ok = all(p.returncode == 0 for p in procs) and elapsed <= args.job_bound
        failed |= not ok
        inner = []
        for o in outs:
            try:
                inner.append("%.2f" % json.loads(o[0].strip().splitlines()[-1])["init_and_allreduce_s"])
            except (ValueError, IndexError, KeyError):
                inner.append("-")
        rows.append(["job %d" % attempt, "%.2f" % elapsed, "/".join(inner), ",".join(str(p.returncode) for p in procs),
                     "ok" if ok else "FAIL"])
        if not ok:
            for p, o in zip(procs, outs):
                print("--- rank exit %s\n%s\n%s" % (p.returncode, o[0][-2000:], o[1][-3000:]))
    time.sleep(args.hold)
    sampling.set()
    sampler.join()
    rss_end, threads_end = proc_status()
    stats = {}
    for cp in client_procs:
        out, _ = cp.communicate("stop\n", timeout=120)
        for k, v in json.loads(out.strip().splitlines()[-1]).items():
            stats[k] = stats.get(k, 0) + v if isinstance(v, int) else v
    server_alive = server._thread is not None and server._thread.is_alive()
    server.stop()
    print("%d hostile clients (%s) against the store on port %d; the job's bound %g s" % (
        args.clients, ", ".join("%s %d%%" % (k, round(100 * w)) for k, w in zip(kinds, weights)), port,
        args.job_bound))
    table(["job", "wall s (launch to exit)", "init+allreduce s per rank", "exit codes", "result"], rows)
    rss_ok = peak["rss"] - rss0 < args.max_rss_mib * 1024
    failed |= not rss_ok or not server_alive
    # the store's bound on connections served at once, plus the threads before
    # the clients came (this one, the store's accept loop and reaper) and the sampler
    max_threads = rendezvous.MAX_CONCURRENT_CONNECTIONS + threads0 + 1
    threads_ok = peak["threads"] <= max_threads
    failed |= not threads_ok
    table(["store process", "before clients", "clients connected", "peak", "end", "bound", "result"], [
        ["RSS KiB", rss0, rss_before_job, peak["rss"], rss_end, "+%d MiB" % args.max_rss_mib,
         "ok" if rss_ok else "FAIL"],
        ["threads", threads0, threads_before_job, peak["threads"], threads_end, max_threads,
         "ok" if threads_ok else "FAIL"]])
    print("store thread alive at the end: %s; requests rejected (401): %d; client outcomes: %s" % (
        server_alive, server.rejected_requests, json.dumps(stats, sort_keys=True)))
    return 1 if failed else 0


# --------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("steps", help="RSS and fd growth over many steps of 100 tensors at P=2 (horovodrun)")
    s.add_argument("--steps", type=int, default=100000)
    s.add_argument("--sample-every", type=int, default=0, help="steps between samples (default: steps/100)")
    s.add_argument("--warmup", type=float, default=0.1, help="fraction of the steps before the reference sample")
    s.add_argument("--max-growth", type=float, default=0.05)
    s.add_argument("--extras-every", type=int, default=10,
                   help="steps between an allgather and a broadcast beside the allreduces (0: never)")

    w = sub.add_parser("_steps-worker")
    w.add_argument("--steps", type=int)
    w.add_argument("--sample-every", type=int)
    w.add_argument("--out")
    w.add_argument("--extras-every", type=int)

    f = sub.add_parser("faults", help="SIGKILL/SIGSTOP a random rank at init, add_process_set or a 64 MiB allreduce")
    f.add_argument("--trials", type=int, default=50)
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--phases", type=lambda t: t.split(","), default=list(PHASES))
    f.add_argument("--signals", type=lambda t: t.split(","), default=list(SIGNALS))
    f.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[2, 3])
    f.add_argument("--round-robin", action="store_true", help="cycle through the phases instead of drawing them")
    f.add_argument("--max-delay", type=float, default=None,
                   help="signal 0 to this many seconds into the phase (default: 0.15 s for init, 2.5 s for the others)")
    f.add_argument("--victims", type=lambda t: [int(x) for x in t.split(",")], default=None,
                   help="draw the victim among these ranks (default: any rank of the job)")
    f.add_argument("--peer-timeout", type=float, default=5.0, help="HOROVOD_PEER_TIMEOUT_SECONDS")
    f.add_argument("--start-timeout", type=float, default=10.0, help="HOROVOD_GLOO_TIMEOUT_SECONDS")
    f.add_argument("--margin", type=float, default=5.0, help="seconds allowed past the timeout")
    f.add_argument("--phase-seconds", type=float, default=3.0, help="how long each rank stays in the phase")
    f.add_argument("--short-stop", type=float, default=1.0, help="how long stop-cont freezes the victim")
    f.add_argument("--json", help="write every trial's record here")
    f.add_argument("--verbose", action="store_true", help="print what each survivor raised")

    w = sub.add_parser("_faults-worker")
    w.add_argument("--phase", choices=PHASES)
    w.add_argument("--phase-seconds", type=float)

    st = sub.add_parser("store", help="the rendezvous store under hostile clients while a job starts")
    st.add_argument("--clients", type=int, default=1000)
    st.add_argument("--slow-fraction", type=float, default=0.6)
    st.add_argument("--jobs", type=int, default=3, help="jobs started one after another under the load")
    st.add_argument("--job-bound", type=float, default=60.0, help="seconds a job may take, launch to exit")
    st.add_argument("--settle", type=float, default=5.0, help="seconds of load before the first job")
    st.add_argument("--hold", type=float, default=5.0, help="seconds of load after the last job")
    st.add_argument("--max-rss-mib", type=float, default=512.0)
    st.add_argument("--seed", type=int, default=1)

    st.add_argument("--client-processes", type=int, default=4)

    w = sub.add_parser("_store-clients")
    w.add_argument("--port", type=int)
    w.add_argument("--clients", type=int)
    w.add_argument("--slow-fraction", type=float)
    w.add_argument("--seed", type=int)

    sub.add_parser("_store-worker")

    args = p.parse_args(argv)
    if args.command == "steps":
        return steps_main(args)
    if args.command == "_steps-worker":
        return steps_worker(args)
    if args.command == "faults":
        return faults_main(args)
    if args.command == "_faults-worker":
        return faults_worker(args)
    if args.command == "store":
        return store_main(args)
    if args.command == "_store-clients":
        return store_clients(args)
    return store_worker(args)


if __name__ == "__main__":
    sys.exit(main())
