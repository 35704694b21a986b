# train_logistic_regression.py - data-parallel training with hvd-core alone:
# a two-layer classifier on a synthetic data set, every rank training on its
# own shard, gradients averaged with hvd.allreduce, initial weights from
# rank 0 with hvd.broadcast. Runs offline on CPU:
#
#   horovodrun -np 2 python examples/numpy/train_logistic_regression.py
"""Synthetic-data training example for hvd-core (numpy only)."""

import argparse
import sys
import time

import numpy as np

import horovod.common as hvd


def make_dataset(num_samples, num_features, num_classes, seed):
    """Gaussian clusters, one per class: separable enough to learn quickly."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 0.6, size=(num_classes, num_features))
    labels = rng.integers(0, num_classes, size=num_samples)
    features = centers[labels] + rng.normal(0, 1, size=(num_samples, num_features))
    return features.astype(np.float32), labels


def forward(params, x):
    hidden = np.maximum(x @ params["w1"] + params["b1"], 0)
    logits = hidden @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return hidden, probs


def gradients(params, x, y):
    hidden, probs = forward(params, x)
    n = x.shape[0]
    loss = -np.log(probs[np.arange(n), y] + 1e-12).mean()
    d_logits = probs
    d_logits[np.arange(n), y] -= 1
    d_logits /= n
    d_hidden = (d_logits @ params["w2"].T) * (hidden > 0)
    grads = {"w2": hidden.T @ d_logits, "b2": d_logits.sum(0), "w1": x.T @ d_hidden, "b1": d_hidden.sum(0)}
    return loss, {k: v.astype(np.float32) for k, v in grads.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--samples", type=int, default=8192)
    args = parser.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    features, labels = make_dataset(args.samples, 32, 4, seed=42)
    # Each rank trains on its own shard of the data set.
    shard_x, shard_y = features[rank::size], labels[rank::size]

    rng = np.random.default_rng(rank)  # deliberately different on every rank...
    params = {"w1": rng.normal(0, 0.1, (32, 64)).astype(np.float32), "b1": np.zeros(64, np.float32),
              "w2": rng.normal(0, 0.1, (64, 4)).astype(np.float32), "b2": np.zeros(4, np.float32)}
    for name in sorted(params):  # ...until rank 0's weights are broadcast
        hvd.broadcast_(params[name], root_rank=0, name="init." + name)

    steps = len(shard_x) // args.batch_size
    start = time.time()
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch * 1000 + rank).permutation(len(shard_x))
        losses = []
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            loss, grads = gradients(params, shard_x[idx], shard_y[idx])
            # One fused, averaged allreduce of all gradients per step.
            names = sorted(grads)
            averaged = hvd.grouped_allreduce([grads[n] for n in names], name="grads", op=hvd.Average)
            for n, g in zip(names, averaged):
                params[n] -= args.lr * g
            losses.append(loss)
        mean_loss = hvd.allreduce(np.array([np.mean(losses)], np.float32), name="loss")[0]
        _, probs = forward(params, features)
        accuracy = float((probs.argmax(1) == labels).mean())
        if rank == 0:
            print("epoch %d: loss %.4f, accuracy %.3f (%d ranks, %.1f s)"
                  % (epoch + 1, mean_loss, accuracy, size, time.time() - start), flush=True)

    # Data-parallel training keeps every replica identical.
    digest = np.array([sum(float(np.abs(p).sum()) for p in params.values())], np.float64)
    all_digests = hvd.allgather(digest, name="digest")
    if not np.allclose(all_digests, all_digests[0], rtol=0, atol=1e-6):
        print("rank %d: replicas diverged: %s" % (rank, all_digests), file=sys.stderr)
        return 1
    if accuracy < 0.8:
        print("rank %d: accuracy %.3f is too low" % (rank, accuracy), file=sys.stderr)
        return 1
    if rank == 0:
        print("done: %d ranks trained identical replicas to accuracy %.3f" % (size, accuracy))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
