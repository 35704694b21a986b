#!/usr/bin/env python3
# grouped_allreduce_benchmark.py - how long one grouped allreduce of many
# tensors takes (a training step's gradients in one fused response), under
# horovodrun, for one or more builds of libhvd_core run alternately (each
# job its own processes, so comparing two builds needs several runs: on a
# small VM whole jobs land in faster and slower modes).
"""Time of a grouped allreduce of a model's gradients, for one or more libhvd_core builds."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name -> tensor shapes. "model": the 102 gradients (6.6 MB) of
# tools/torch_training_benchmark.py; the others stress one side each.
SHAPES = {
    "model": [(256, 256), (256,), (256,), (256,)] * 25 + [(10, 256), (10,)],
    "big": [(1 << 20,)] * 16,     # 64 MiB in 4 MiB tensors
    "mid": [(65536,)] * 8,        # 2 MiB in 256 KiB tensors
    "small": [(1024,)] * 1000,    # 4 MB in 4 KiB tensors
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--shapes", choices=sorted(SHAPES), default="model")
    p.add_argument("--iters", type=int, default=200, help="timed calls per job")
    p.add_argument("--runs", type=int, default=3, help="jobs per build, alternating between builds")
    p.add_argument("--libs", default="", help="comma-separated libhvd_core.so paths (default: the one found)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def worker(args):
    import torch

    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tensors = [torch.randn(*s) for s in SHAPES[args.shapes]]
    expected = [t * hvd.size() for t in tensors]
    check = [t.clone() for t in tensors]
    hvd.synchronize(hvd.grouped_allreduce_async_(check, op=hvd.Sum, name="check"))
    # Every rank has the same inputs (same seed), so the sum is size times them.
    assert all(torch.allclose(c, e) for c, e in zip(check, expected)), "wrong grouped allreduce result"
    samples = []
    for i in range(args.iters + 20):
        t0 = time.perf_counter()
        hvd.synchronize(hvd.grouped_allreduce_async_(tensors, op=hvd.Average, name="grads"))
        if i >= 20:
            samples.append(time.perf_counter() - t0)
    if hvd.rank() == 0:
        samples.sort()
        print("RESULT " + json.dumps({"median_ms": statistics.median(samples) * 1e3,
                                      "p10_ms": samples[len(samples) // 10] * 1e3}))
    hvd.shutdown()


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    libs = [lib for lib in args.libs.split(",") if lib] or [os.environ.get("HVD_CORE_LIBRARY", "")]
    results = {lib: [] for lib in libs}
    for run in range(args.runs):
        for lib in libs:
            env = dict(os.environ)
            if lib:
                env["HVD_CORE_LIBRARY"] = lib
            cmd = [sys.executable, "-m", "horovod.runner", "-np", str(args.np), sys.executable,
                   os.path.abspath(__file__), "--worker", "--shapes", args.shapes, "--iters", str(args.iters)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            lines = [line for line in out.stdout.splitlines() if "RESULT " in line]
            if out.returncode != 0 or not lines:
                sys.exit("job failed:\n" + out.stdout[-3000:] + out.stderr[-3000:])
            r = json.loads(lines[0].split("RESULT ", 1)[1])
            results[lib].append(r["median_ms"])
            print("run %d, %s: median %.3f ms, p10 %.3f ms" % (run + 1, lib or "default library", r["median_ms"],
                                                               r["p10_ms"]))
    for lib, medians in results.items():
        print("| P=%d, %s, %s | medians %s ms |" % (args.np, args.shapes, lib or "default library",
                                                   " / ".join("%.2f" % m for m in medians)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
