# tensorflow2_mnist.py - Horovod's TensorFlow 2 recipe on a small conv net:
# init, pin one GPU per process, scale the learning rate by the number of
# workers, average gradients with DistributedGradientTape, broadcast the
# initial state from rank 0 after the first step, shard the data by rank,
# divide the steps by the number of workers, checkpoint on rank 0 only.
# The data are synthetic MNIST-shaped images (28x28x1, 10 classes; each
# class a noisy template), so it runs offline:
#
#     horovodrun -np 2 python examples/tensorflow2/tensorflow2_mnist.py
"""Distributed MNIST-style training with horovod.tensorflow and a tf.GradientTape."""

import argparse
import os
import tempfile
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd


def synthetic_mnist(samples, seed):
    """MNIST-shaped images and labels: a fixed template per class plus noise (learnable, offline)."""
    templates = np.random.RandomState(0).rand(10, 28, 28, 1).astype(np.float32)
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=samples).astype(np.int64)
    images = templates[labels] + 0.5 * rng.randn(samples, 28, 28, 1).astype(np.float32)
    return images, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200, help="training steps in total (divided among workers)")
    parser.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--lr", type=float, default=0.001, help="single-worker learning rate")
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--test-samples", type=int, default=1024)
    parser.add_argument("--checkpoint-dir", default=os.path.join(tempfile.gettempdir(), "tensorflow2_mnist_ckpt"))
    args = parser.parse_args()

    # hvd: start the engine before anything else uses it.
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)

    # hvd: one GPU per process, chosen by the local rank.
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    images, labels = synthetic_mnist(args.train_samples, seed=1)
    # hvd: every rank reads a different shard of the data.
    dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
               .shard(hvd.size(), hvd.rank())
               .repeat()
               .shuffle(1024, seed=hvd.rank())
               .batch(args.batch_size))

    tf.keras.utils.set_random_seed(hvd.rank())  # different on purpose: the broadcast makes them equal
    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # hvd: scale the learning rate with the number of ranks (the effective batch grows with it).
    opt = tf.keras.optimizers.Adam(args.lr * hvd.size())

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss_value = loss(labels, model(images, training=True))
        # hvd: wrap the tape so that gradient() returns gradients averaged over all ranks.
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss_value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # hvd: copy rank 0's model and optimizer variables to every other rank, so all
        # replicas continue from identical weights however they were initialised (random
        # or from a checkpoint). It happens after the first step because the optimizer
        # creates its variables on its first apply_gradients().
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss_value

    start = time.time()
    # hvd: fewer steps per rank as ranks are added, for about the same total work.
    for batch, (batch_images, batch_labels) in enumerate(dataset.take(max(1, args.steps // hvd.size()))):
        loss_value = training_step(batch_images, batch_labels, batch == 0)
        if batch % 20 == 0 and hvd.rank() == 0:
            print("step #%d\tloss: %.6f" % (batch, loss_value), flush=True)

    # Every replica must hold the same weights: compare a checksum across ranks.
    checksum = tf.add_n([tf.reduce_sum(tf.cast(v, tf.float64)) for v in model.trainable_variables])
    checksums = hvd.allgather(tf.reshape(checksum, [1])).numpy()
    test_images, test_labels = synthetic_mnist(args.test_samples, seed=2)
    predictions = tf.argmax(model(test_images, training=False), axis=1).numpy()
    accuracy = float(np.mean(predictions == test_labels))

    # hvd: only rank 0 writes the checkpoint; several ranks writing one file would clobber it.
    if hvd.rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        path = os.path.join(args.checkpoint_dir, "mnist.weights.h5")
        model.save_weights(path)
        print("checkpoint: %s" % path)
        print("test accuracy %.1f%%" % (100 * accuracy))
        identical = bool(np.all(checksums == checksums[0]))
        print("done: %d ranks trained %s replicas in %.1f s"
              % (hvd.size(), "identical" if identical else "DIFFERENT", time.time() - start))


if __name__ == "__main__":
    main()
