# pytorch_synthetic_benchmark.py - Horovod's synthetic-data throughput
# benchmark for horovod.torch: random images and labels, a small ResNet-style
# model defined here (no torchvision needed), DistributedOptimizer over all
# ranks, images/sec per rank and in total:
#
#   horovodrun -np 2 python examples/pytorch/pytorch_synthetic_benchmark.py
"""Synthetic-data training throughput benchmark for horovod.torch."""

import argparse
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and an identity (or 1x1) shortcut."""

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A ResNet-18-shaped network, narrower, for CPU-sized benchmarks."""

    def __init__(self, num_classes=1000, width=16, blocks=(2, 2, 2, 2)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, in_planes = [], width
        for i, n in enumerate(blocks):
            planes = width * 2 ** i
            for j in range(n):
                layers.append(BasicBlock(in_planes, planes, stride=2 if (j == 0 and i > 0) else 1))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                        help="use fp16 compression during allreduce")
    parser.add_argument("--bf16-allreduce", action="store_true", default=False,
                        help="use bf16 compression during allreduce")
    parser.add_argument("--batch-size", type=int, default=16, help="input batch size")
    parser.add_argument("--image-size", type=int, default=64, help="input image height and width")
    parser.add_argument("--num-classes", type=int, default=100)
    parser.add_argument("--width", type=int, default=16, help="channels of the first stage")
    parser.add_argument("--num-warmup-batches", type=int, default=2,
                        help="number of warm-up batches that don't count towards benchmark")
    parser.add_argument("--num-batches-per-iter", type=int, default=5, help="number of batches per benchmark iteration")
    parser.add_argument("--num-iters", type=int, default=5, help="number of benchmark iterations")
    parser.add_argument("--use-adasum", action="store_true", default=False, help="use adasum algorithm to do reduction")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(max(1, torch.get_num_threads() // hvd.local_size()))

    model = SmallResNet(num_classes=args.num_classes, width=args.width)
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

    compression = hvd.Compression.none
    if args.fp16_allreduce:
        compression = hvd.Compression.fp16
    elif args.bf16_allreduce:
        compression = hvd.Compression.bf16
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    num_tensors = len(list(model.parameters()))
    log("Model: SmallResNet (%d parameter tensors, %.2fM parameters)"
        % (num_tensors, sum(p.numel() for p in model.parameters()) / 1e6))
    log("Batch size: %d" % args.batch_size)
    log("Number of CPUs: %d" % hvd.size())

    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per CPU" % (x, img_sec))
        img_secs.append(img_sec)

    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log("Img/sec per CPU: %.1f +-%.1f" % (img_sec_mean, img_sec_conf))
    log("Total img/sec on %d CPU(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * img_sec_mean,
                                                      hvd.size() * img_sec_conf))
    hvd.shutdown()


if __name__ == "__main__":
    main()
