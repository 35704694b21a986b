#!/usr/bin/env python
# torch_training_benchmark.py - training-step time of hvd.DistributedOptimizer
# against torch DistributedDataParallel (gloo), measured in the same
# processes on the same model (~100 parameter tensors, synthetic data), plus
# the model's gradients reduced by one async allreduce each (against gloo's
# async all_reduce) and the latency of a 4-byte hvd.allreduce through
# horovod.torch (and of torch.distributed.all_reduce on gloo as a reference).
#
#   python tools/torch_training_benchmark.py            # starts itself with horovodrun -np 2
#   horovodrun -np 2 python tools/torch_training_benchmark.py --steps 30
"""hvd.DistributedOptimizer vs torch DDP (gloo) step time, and small-allreduce latency."""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--np", type=int, default=2, help="ranks when this script launches itself")
    parser.add_argument("--blocks", type=int, default=25, help="Linear+LayerNorm blocks (4 tensors each)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round and method")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (median reported)")
    parser.add_argument("--groups", type=int, default=4,
                        help="also time DistributedOptimizer(groups=N), gradients reduced in N grouped "
                             "allreduces (0: skip)")
    parser.add_argument("--latency-iters", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: cores / ranks)")
    return parser.parse_args()


def launch_self(args):
    # Not started by a launcher: become one, so a plain `python tools/...` works.
    cmd = [sys.executable, "-m", "horovod.runner", "-np", str(args.np), sys.executable,
           os.path.abspath(__file__)] + sys.argv[1:]
    return subprocess.call(cmd)


def build_model(torch, args):
    torch.manual_seed(0)
    layers = []
    for _ in range(args.blocks):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.LayerNorm(args.width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(args.width, 10))
    return torch.nn.Sequential(*layers)


def main():
    args = parse_args()
    if "HOROVOD_RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        return launch_self(args)

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)

    # DDP in the same processes: rank 0 picks a free port and tells the others.
    port = None
    if rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = hvd.broadcast_object(port, root_rank=0, name="ddp_port")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=size)

    g = torch.Generator().manual_seed(rank)
    data = torch.randn(args.batch_size, args.width, generator=g)
    target = torch.randint(0, 10, (args.batch_size,), generator=g)

    hvd_model = build_model(torch, args)
    n_tensors = len(list(hvd_model.parameters()))
    n_params = sum(p.numel() for p in hvd_model.parameters())
    hvd_opt = hvd.DistributedOptimizer(torch.optim.SGD(hvd_model.parameters(), lr=0.01),
                                       named_parameters=hvd_model.named_parameters())
    # Horovod's own default: every gradient reduced on its own (no buckets).
    tensor_model = build_model(torch, args)
    os.environ["HOROVOD_GRADIENT_BUCKET_MB"] = "0"
    tensor_opt = hvd.DistributedOptimizer(torch.optim.SGD(tensor_model.parameters(), lr=0.01),
                                          named_parameters=tensor_model.named_parameters())
    del os.environ["HOROVOD_GRADIENT_BUCKET_MB"]
    grp_model = build_model(torch, args)
    grp_opt = hvd.DistributedOptimizer(torch.optim.SGD(grp_model.parameters(), lr=0.01),
                                       named_parameters=grp_model.named_parameters(), groups=args.groups or None)
    ddp_model = torch.nn.parallel.DistributedDataParallel(build_model(torch, args))
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    # No communication at all: the floor any data-parallel step can reach here.
    local_model = build_model(torch, args)
    local_opt = torch.optim.SGD(local_model.parameters(), lr=0.01)

    def step(model, opt):
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    def timed(fn, *fn_args):
        for _ in range(3):  # warm-up: response cache, buckets, allocator
            fn(*fn_args)
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            fn(*fn_args)
        hvd.barrier()
        return (time.perf_counter() - t0) / args.steps

    # Interleaved rounds so that machine noise hits both methods alike.
    hvd_times, tensor_times, grp_times, ddp_times, local_times = [], [], [], [], []
    for _ in range(args.rounds):
        hvd_times.append(timed(step, hvd_model, hvd_opt))
        tensor_times.append(timed(step, tensor_model, tensor_opt))
        if args.groups:
            grp_times.append(timed(step, grp_model, grp_opt))
        ddp_times.append(timed(step, ddp_model, ddp_opt))
        local_times.append(timed(step, local_model, local_opt))

    # Same start, same data, same averaged gradients: the two must agree.
    diff = max((a - b).abs().max().item() for m in (hvd_model, tensor_model)
               for a, b in zip(m.parameters(), ddp_model.module.parameters()))
    if args.groups:
        diff = max(diff, max((a - b).abs().max().item()
                             for a, b in zip(grp_model.parameters(), ddp_model.module.parameters())))

    def latency(fn):
        for _ in range(200):
            fn()
        samples = []
        for _ in range(args.latency_iters):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1e6

    # The model's gradients reduced one call each without waiting, then all
    # waited for: a hand-written loop, or hooks without buckets. Zeros, so
    # that repeated sums stay finite.
    grads = [torch.zeros_like(p) for p in build_model(torch, args).parameters()][::-1]
    grad_names = ["async.%d" % i for i in range(len(grads))]

    def hvd_async_loop():
        handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(grads, grad_names)]
        for handle in handles:
            hvd.synchronize(handle)

    def gloo_async_loop():
        for work in [dist.all_reduce(t, async_op=True) for t in grads]:
            work.wait()

    hvd_async_times, gloo_async_times = [], []
    for _ in range(args.rounds):
        hvd_async_times.append(timed(hvd_async_loop))
        gloo_async_times.append(timed(gloo_async_loop))

    small = torch.zeros(1, dtype=torch.float32)  # 4 bytes
    hvd.barrier()
    hvd_lat = latency(lambda: hvd.allreduce(small, name="lat"))
    hvd_lat_inplace = latency(lambda: hvd.allreduce_(small, name="lat_"))
    dist.barrier()
    gloo_lat = latency(lambda: dist.all_reduce(small))

    if rank == 0:
        h, d = statistics.median(hvd_times) * 1e3, statistics.median(ddp_times) * 1e3
        print("model: %d blocks x Linear(%d)+LayerNorm: %d parameter tensors, %.2fM parameters; batch %d per rank; "
              "P=%d; %d torch threads per rank" % (args.blocks, args.width, n_tensors, n_params / 1e6,
                                                   args.batch_size, size, threads))
        print("| measurement | hvd (horovod.torch) | torch DDP (gloo) | hvd / DDP |")
        print("|---|---|---|---|")
        print("| training step, median of %d rounds x %d steps (ms) | %.2f | %.2f | %.2f |"
              % (args.rounds, args.steps, h, d, h / d))
        tm = statistics.median(tensor_times) * 1e3
        print("| training step, per-tensor allreduces (HOROVOD_GRADIENT_BUCKET_MB=0) (ms) | %.2f | %.2f | %.2f |"
              % (tm, d, tm / d))
        if args.groups:
            gm = statistics.median(grp_times) * 1e3
            print("| training step, DistributedOptimizer(groups=%d) (ms) | %.2f | %.2f | %.2f |"
                  % (args.groups, gm, d, gm / d))
        lm = statistics.median(local_times) * 1e3
        print("| training step without communication (plain SGD, each rank alone) (ms) | %.2f | %.2f | %.2f |"
              % (lm, d, lm / d))
        ha, ga = statistics.median(hvd_async_times) * 1e3, statistics.median(gloo_async_times) * 1e3
        print("| %d gradients, an async allreduce each, then all waited for (ms) | %.2f | %.2f | %.2f |"
              % (len(grads), ha, ga, ha / ga))
        print("| 4-byte allreduce, median (us) | %.1f | %.1f | %.2f |" % (hvd_lat, gloo_lat, hvd_lat / gloo_lat))
        print("| 4-byte allreduce_ (in place), median (us) | %.1f | | |" % hvd_lat_inplace)
        print("max |param difference| hvd vs DDP after the same number of identical steps: %.2e" % diff)
    dist.destroy_process_group()
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
