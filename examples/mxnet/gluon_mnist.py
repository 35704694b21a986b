# gluon_mnist.py - MNIST-style data-parallel training with horovod.mxnet and
# Gluon, on a synthetic MNIST-shaped data set (28x28 grey images, 10 classes)
# so it runs offline on CPU. Every rank trains on its shard of each epoch,
# DistributedTrainer averages the gradients with hvd's allreduce, rank 0's
# initial parameters are broadcast first, and the test accuracy is averaged
# over the ranks:
#
#   horovodrun -np 2 python examples/mxnet/gluon_mnist.py
"""MNIST-style data-parallel training example for horovod.mxnet (Gluon, synthetic data)."""

import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import horovod.mxnet as hvd


def synthetic_mnist(num_samples, seed):
    """Ten fixed random 'digit' templates plus noise: learnable in a few epochs.
    Every rank builds the same data set from the same seed, as it would load
    the same files, and then takes its own shard."""
    templates = (np.random.RandomState(1234).rand(10, 1, 28, 28) > 0.5).astype(np.float32)
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, num_samples)
    images = templates[labels] + 0.5 * rng.randn(num_samples, 1, 28, 28).astype(np.float32)
    return (images - 0.5) / 0.5, labels.astype(np.float32)


def shard(images, labels, batch_size):
    """This rank's part of the data set, in batches."""
    images, labels = images[hvd.rank()::hvd.size()], labels[hvd.rank()::hvd.size()]
    return gluon.data.DataLoader(gluon.data.ArrayDataset(images, labels), batch_size=batch_size, shuffle=False,
                                 last_batch="discard")


def conv_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(10, kernel_size=5, activation="relu"), gluon.nn.MaxPool2D(2),
            gluon.nn.Conv2D(20, kernel_size=5, activation="relu"), gluon.nn.MaxPool2D(2),
            gluon.nn.Flatten(), gluon.nn.Dense(50, activation="relu"), gluon.nn.Dense(10))
    return net


def evaluate(net, loader):
    metric = mx.metric.Accuracy()
    for data, label in loader:
        metric.update([label], [net(data)])
    _, accuracy = metric.get()
    # Each rank saw its shard: average the accuracy over the ranks.
    return hvd.allreduce(mx.nd.array([accuracy]), name="accuracy").asscalar()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=64, help="input batch size per rank")
    parser.add_argument("--epochs", type=int, default=3, help="number of epochs")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (scaled by the number of ranks)")
    parser.add_argument("--train-samples", type=int, default=8192, help="synthetic training set size")
    parser.add_argument("--test-samples", type=int, default=1024, help="synthetic test set size")
    args = parser.parse_args()

    hvd.init()
    mx.random.seed(hvd.rank())  # ranks start different: broadcast_parameters makes them equal

    train = shard(*synthetic_mnist(args.train_samples, seed=1), args.batch_size)
    test = shard(*synthetic_mnist(args.test_samples, seed=2), args.batch_size)

    net = conv_net()
    net.initialize(mx.init.Xavier(magnitude=2.24), ctx=mx.cpu())
    net.hybridize()
    net(mx.nd.zeros((1, 1, 28, 28)))  # runs the deferred initialisation, so there is something to broadcast
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)

    # The learning rate grows with the number of ranks, as the global batch does.
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": args.lr * hvd.size(), "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for data, label in train:
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(args.batch_size)
            total += loss.mean().asscalar()
            batches += 1
        accuracy = evaluate(net, test)
        if hvd.rank() == 0:
            print("epoch %d: train loss %.4f, test accuracy %.2f%%" % (epoch, total / max(1, batches),
                                                                       100 * accuracy))

    # Every rank applied the same averaged gradients: the replicas must be equal.
    weights = np.concatenate([p.data().asnumpy().ravel() for _, p in sorted(net.collect_params().items())])
    digests = hvd.allgather_object(float(np.abs(weights).sum()))
    if hvd.rank() == 0:
        same = all(abs(d - digests[0]) <= 1e-6 * max(1.0, abs(digests[0])) for d in digests)
        print("done: %d ranks trained %s replicas" % (hvd.size(), "identical" if same else "DIFFERENT"))


if __name__ == "__main__":
    main()
