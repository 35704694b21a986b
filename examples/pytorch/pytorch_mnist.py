# pytorch_mnist.py - Horovod's MNIST training recipe with horovod.torch, on
# a synthetic MNIST-shaped data set (28x28 grey images, 10 classes) so it runs
# offline on CPU. Every rank trains on its shard (DistributedSampler), the
# optimizer averages gradients (DistributedOptimizer), and rank 0's initial
# model and optimizer state are broadcast first:
#
#   horovodrun -np 2 python examples/pytorch/pytorch_mnist.py
"""MNIST-style data-parallel training example for horovod.torch (synthetic data)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed

import horovod.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def synthetic_mnist(num_samples, seed):
    """Ten fixed random 'digit' templates plus noise: learnable in a few epochs.
    Every rank builds the same data set from the same seed, as it would load the
    same files; the sampler then gives each rank its shard."""
    g = torch.Generator().manual_seed(1234)
    templates = (torch.rand(10, 1, 28, 28, generator=g) > 0.5).float()
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (num_samples,), generator=g)
    images = templates[labels] + 0.5 * torch.randn(num_samples, 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset((images - 0.5) / 0.5, labels)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=64, help="input batch size for training")
    parser.add_argument("--test-batch-size", type=int, default=256, help="input batch size for testing")
    parser.add_argument("--epochs", type=int, default=3, help="number of epochs to train")
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--test-samples", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (per rank; scaled by size)")
    parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
    parser.add_argument("--seed", type=int, default=42, help="random seed")
    parser.add_argument("--log-interval", type=int, default=20, help="batches between logging")
    parser.add_argument("--fp16-allreduce", action="store_true", help="use fp16 compression during allreduce")
    parser.add_argument("--bf16-allreduce", action="store_true", help="use bf16 compression during allreduce")
    parser.add_argument("--use-adasum", action="store_true", help="use adasum algorithm to do reduction")
    parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                        help="apply gradient predivide factor in optimizer")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    # Two processes per host share the cores; more threads each only contend.
    torch.set_num_threads(max(1, torch.get_num_threads() // hvd.local_size()))

    train_dataset = synthetic_mnist(args.train_samples, seed=1)
    test_dataset = synthetic_mnist(args.test_samples, seed=2)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # Averaged gradients of a larger global batch: scale the learning rate by
    # the number of ranks (Adasum does not need it).
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.none
    if args.fp16_allreduce:
        compression = hvd.Compression.fp16
    elif args.bf16_allreduce:
        compression = hvd.Compression.bf16
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    def train(epoch):
        model.train()
        train_sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, batch_idx * len(data), len(train_sampler),
                    100. * batch_idx / len(train_loader), loss.item()), flush=True)

    def test():
        model.eval()
        test_loss, test_accuracy = 0., 0.
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.data.max(1, keepdim=True)[1]
                test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
        test_loss /= len(test_sampler)
        test_accuracy /= len(test_sampler)
        test_loss = metric_average(test_loss, "avg_loss")
        test_accuracy = metric_average(test_accuracy, "avg_accuracy")
        if hvd.rank() == 0:
            print("\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n".format(test_loss, 100. * test_accuracy),
                  flush=True)
        return test_accuracy

    accuracy = 0.
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        accuracy = test()

    # Data parallelism keeps one model: check that the replicas are identical.
    flat = torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], dim=1)
    gathered = hvd.allgather(flat, name="replica_check")
    identical = all(torch.equal(gathered[0], row) for row in gathered)
    if hvd.rank() == 0:
        print("done: %d ranks trained %s replicas, test accuracy %.2f%%"
              % (hvd.size(), "identical" if identical else "DIVERGED", 100. * accuracy), flush=True)
    hvd.shutdown()
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
