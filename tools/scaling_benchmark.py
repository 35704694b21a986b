#!/usr/bin/env python3
# scaling_benchmark.py - how the engine's per-step costs grow with ranks,
# hosts and tensors per step, measured over fake hosts (each its own network
# namespace, as fake_hosts.sh makes them), plus the long control-plane run of
# docs/scaling.md. What the numbers mean and the model fitted to them:
# docs/scaling.md.
"""Per-step costs of hvd's engine against ranks, hosts and tensor count (fake hosts).

Usage (root, with the workplace's fake_hosts.sh):

    python tools/scaling_benchmark.py --fake-hosts ../shared/tools/fake_hosts.sh
    python tools/scaling_benchmark.py --fake-hosts ... --ranks 2,4 --tensors 1,100 --steps 200
    python tools/scaling_benchmark.py --fake-hosts ... --control-plane 32   # 32 ranks, 100 tensors, 1000 steps

A step submits T named float32 tensors asynchronously (`allreduce_async_`)
and waits for all of them, as a training step does with its gradients. Each
configuration runs as its own job of P ranks on P/2 hosts of 2 ranks (P=2:
2 hosts of 1 rank; P=1: one rank, no network) and reports the median step
time of the slowest rank, for:

  cached      T tensors of 4 floats, response cache on (the steady state)
  negotiated  the same with HOROVOD_CACHE_CAPACITY=0 (every step negotiated)
  unfused     cached, HOROVOD_FUSION_THRESHOLD=0 (one collective per tensor)
  data        one 4 MiB tensor (data movement; T is ignored)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import allreduce_benchmark as ab  # noqa: E402  (reads the workers' files)

MODES = {
    "cached": {},
    "negotiated": {"HOROVOD_CACHE_CAPACITY": "0"},
    "unfused": {"HOROVOD_FUSION_THRESHOLD": "0"},
    "data": {},
}


def worker(out_dir, tensors, steps, warmup, floats):
    import numpy as np
    import horovod.common as hvd

    hvd.init()
    bufs = [np.zeros(floats, np.float32) for _ in range(tensors)]
    names = ["scaling.%d" % i for i in range(tensors)]
    times = []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        handles = [hvd.allreduce_async_(b, name=n, op=hvd.Sum) for b, n in zip(bufs, names)]
        for h in handles:
            hvd.synchronize(h)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    rank = hvd.rank()
    hvd.shutdown()
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(times, f)


def placement(ranks):
    """(hosts, ranks per host): 1 rank alone, 2 hosts of 1 rank for P=2, else P/2 hosts of 2 ranks."""
    if ranks <= 2:
        return ranks, 1
    return ranks // 2, 2


def run_job(ranks, mode, tensors, steps, opts):
    hosts, slots = placement(ranks)
    floats, count = (1 << 20, 1) if mode == "data" else (4, tensors)
    with tempfile.TemporaryDirectory(prefix="hvd-scaling-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
        env.update(MODES[mode])
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, "-m", "horovod.runner", "-np", str(ranks),
               "-H", ",".join("fh%d:%d" % (h + 1, slots) for h in range(hosts)),
               sys.executable, os.path.abspath(__file__), "--worker", tmp, str(count), str(steps),
               str(max(5, steps // 10)), str(floats)]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=opts.timeout, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        per_rank = ab.read_rank_payloads(tmp, ranks)
        if proc.returncode != 0 or len(per_rank) != ranks:
            print("  ! P=%d %s T=%d failed:\n%s" % (ranks, mode, tensors, proc.stdout[-3000:]), flush=True)
            return None
    slowest = [max(ts) for ts in zip(*per_rank)]
    return {"median_ms": statistics.median(slowest) * 1e3, "p90_ms": sorted(slowest)[int(0.9 * len(slowest))] * 1e3,
            "steps": len(slowest), "wall_s": wall}


def fake_hosts(script, *args):
    subprocess.run(["bash", script] + list(args), check=True, stdout=subprocess.DEVNULL)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fake-hosts", metavar="SCRIPT", help="path of fake_hosts.sh (required)")
    ap.add_argument("--ranks", default="1,2,4,8,16", help="rank counts (default 1,2,4,8,16)")
    ap.add_argument("--tensors", default="1,10,100", help="tensors per step (default 1,10,100)")
    ap.add_argument("--modes", default=",".join(MODES), help="subset of %s" % ", ".join(MODES))
    ap.add_argument("--steps", type=int, default=200, help="timed steps per job (default 200)")
    ap.add_argument("--control-plane", type=int, metavar="P",
                    help="instead: one job of P ranks, 100 tensors a step, --steps (default 1000) steps")
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.worker:
        out, tensors, steps, warmup, floats = opts.worker
        worker(out, int(tensors), int(steps), int(warmup), int(floats))
        return 0
    if not opts.fake_hosts:
        ap.error("--fake-hosts is required")

    if opts.control_plane:
        jobs = [(opts.control_plane, "cached", 100)]
        steps = opts.steps if "--steps" in (argv or sys.argv) else 1000
    else:
        ranks = [int(x) for x in opts.ranks.split(",")]
        tensors = [int(x) for x in opts.tensors.split(",")]
        modes = [m.strip() for m in opts.modes.split(",")]
        jobs = [(p, m, t) for p in ranks for m in modes for t in ([1] if m == "data" else tensors)]
        steps = opts.steps
    results = []
    for p in sorted({j[0] for j in jobs}):
        hosts, slots = placement(p)
        fake_hosts(opts.fake_hosts, "down")
        fake_hosts(opts.fake_hosts, "up", str(hosts))
        try:
            for ranks, mode, t in [j for j in jobs if j[0] == p]:
                r = run_job(ranks, mode, t, steps, opts)
                if r is None:
                    continue
                r.update({"ranks": ranks, "hosts": hosts, "mode": mode, "tensors": t})
                results.append(r)
                print("P=%-3d hosts=%-2d %-10s T=%-4d step median %8.3f ms  p90 %8.3f ms  (%d steps, %.0f s)"
                      % (ranks, hosts, mode, t, r["median_ms"], r["p90_ms"], r["steps"], r["wall_s"]), flush=True)
        finally:
            fake_hosts(opts.fake_hosts, "down")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "cpus": os.cpu_count(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
