#!/usr/bin/env python3
# autotune_benchmark.py - does HOROVOD_AUTOTUNE end at least as fast as the
# defaults? Alternates two jobs on the same model: one with the defaults, one
# with HOROVOD_AUTOTUNE=1 that trains until the tuner has finished (rank 0's
# log ends with the best setting) before the timed steps. Both time the same
# steps of hvd.DistributedOptimizer, with hvd's default gradient buckets
# (whose size autotune tries too) or, with --bucket-mb 0, every gradient
# reduced on its own (Horovod's way), where the engine's fusion and cycle
# time decide the most.
"""HOROVOD_AUTOTUNE against the defaults on a torch training step."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--blocks", type=int, default=25, help="Linear+LayerNorm blocks (4 tensors each)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=200, help="timed steps per job")
    p.add_argument("--bucket-mb", default=None,
                   help="HOROVOD_GRADIENT_BUCKET_MB of both jobs, which the tuner then keeps (0: per tensor; "
                        "default: unset, 25 MiB buckets whose size the tuner tries too)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds of the two jobs")
    p.add_argument("--max-tuning-steps", type=int, default=3000,
                   help="steps the autotuned job may train before timing, waiting for the tuner to finish")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def worker(args):
    import torch
    import torch.nn.functional as F

    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    torch.manual_seed(0)
    layers = []
    for _ in range(args.blocks):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.LayerNorm(args.width)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(hvd.rank())
    data = torch.randn(args.batch_size, args.width, generator=g)
    target = torch.randint(0, 10, (args.batch_size,), generator=g)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    log = os.environ.get("HOROVOD_AUTOTUNE_LOG")
    max_samples = int(os.environ.get("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "20"))
    tuning_steps = 0
    if log:
        finished = False
        while not finished and tuning_steps < args.max_tuning_steps:
            for _ in range(10):
                step()
            tuning_steps += 10
            if opt._bucket_tuning is not None:
                # Every rank hears that the tuner is done in the same step.
                finished = not opt._bucket_tuning._asking
                continue
            # Only rank 0 tunes and logs; it tells the others when the best setting is in.
            done = False
            if hvd.rank() == 0:
                # A header, a row per tried setting (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES of
                # them, the cache the other way, two pipeline chunks), then the best again.
                with open(log) as f:
                    done = len(f.read().splitlines()) >= 1 + max_samples + 4
            finished = hvd.broadcast_object(done, root_rank=0, name="tuned")
    for _ in range(5):
        step()
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    hvd.barrier()
    elapsed = (time.perf_counter() - t0) / args.steps
    if hvd.rank() == 0:
        print("RESULT " + json.dumps({"step_ms": elapsed * 1e3, "tuning_steps": tuning_steps,
                                      "bucket_bytes": opt._bucket_bytes}))
    hvd.shutdown()


def run_job(args, autotune):
    env = dict(os.environ)
    env.pop("HOROVOD_GRADIENT_BUCKET_MB", None)
    if args.bucket_mb is not None:
        env["HOROVOD_GRADIENT_BUCKET_MB"] = args.bucket_mb
    log = None
    if autotune:
        log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
        env.update(HOROVOD_AUTOTUNE="1", HOROVOD_AUTOTUNE_LOG=log)
    cmd = [sys.executable, "-m", "horovod.runner", "-np", str(args.np), sys.executable, os.path.abspath(__file__),
           "--worker", "--blocks", str(args.blocks), "--width", str(args.width), "--batch-size",
           str(args.batch_size), "--steps", str(args.steps), "--max-tuning-steps", str(args.max_tuning_steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    lines = [line for line in out.stdout.splitlines() if "RESULT " in line]
    if out.returncode != 0 or not lines:
        sys.exit("job failed:\n" + out.stdout[-3000:] + out.stderr[-3000:])
    result = json.loads(lines[0].split("RESULT ", 1)[1])
    if log:
        with open(log) as f:
            result["best"] = f.read().splitlines()[-1]
        os.unlink(log)
    return result


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    defaults, tuned = [], []
    for r in range(args.rounds):
        d = run_job(args, autotune=False)
        t = run_job(args, autotune=True)
        defaults.append(d["step_ms"])
        tuned.append(t["step_ms"])
        print("round %d: defaults %.2f ms/step; autotuned %.2f ms/step after %d tuning steps, best: %s, "
              "gradient bucket %d bytes" % (r + 1, d["step_ms"], t["step_ms"], t["tuning_steps"], t["best"],
                                            t["bucket_bytes"]))
    d, t = statistics.median(defaults), statistics.median(tuned)
    reduced = ("25 MiB buckets, tuned" if args.bucket_mb is None else "per-tensor allreduces"
               if float(args.bucket_mb) == 0 else "%s MiB buckets" % args.bucket_mb)
    print("| P=%d, %d blocks, width %d, %s | defaults %.2f ms | autotuned %.2f ms | "
          "autotuned / defaults %.2f |" % (args.np, args.blocks, args.width, reduced, d, t, t / d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
