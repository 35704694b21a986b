# keras_mnist.py - the Horovod Keras recipe end to end on MNIST-shaped data:
# init, pin one GPU per process (when there are GPUs), scale the learning
# rate by the number of workers, DistributedOptimizer, broadcast from rank 0,
# metric averaging, learning-rate warmup, checkpoints on rank 0 only, each
# rank training on its own shard for steps_per_epoch / size steps.
# Synthetic data (10 learnable digit-like classes), so it runs offline:
#
#   horovodrun -np 2 python examples/keras/keras_mnist.py
#   TF_USE_LEGACY_KERAS=1 horovodrun -np 2 python examples/keras/keras_mnist.py   # tf-keras
"""Horovod Keras MNIST example (synthetic data)."""

import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd

keras = tf.keras


def parse_args():
    p = argparse.ArgumentParser(description="Horovod Keras MNIST example (synthetic data)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per-worker batch size")
    p.add_argument("--lr", type=float, default=0.001, help="single-worker learning rate (scaled by size)")
    p.add_argument("--warmup-epochs", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=8192, help="samples per epoch, all workers together")
    p.add_argument("--test-samples", type=int, default=1024)
    p.add_argument("--checkpoint-dir", default=None, help="defaults to a temporary folder")
    return p.parse_args()


def synthetic_mnist(n, seed):
    """28x28 uint8 images of 10 fixed random 'digit' templates plus noise."""
    templates = np.random.RandomState(1234).rand(10, 28, 28) > 0.7
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n)
    images = templates[labels] * 180.0 + rng.rand(n, 28, 28) * 120.0
    return images.astype(np.uint8)[..., None], labels.astype(np.int64)


def build_model():
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Rescaling(1.0 / 255),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def main():
    args = parse_args()
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process).
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    # Horovod: every rank draws the same data set and keeps its own shard.
    x_train, y_train = synthetic_mnist(args.train_samples, seed=1)
    x_test, y_test = synthetic_mnist(args.test_samples, seed=2)
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    x_test, y_test = x_test[hvd.rank()::hvd.size()], y_test[hvd.rank()::hvd.size()]
    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
             .repeat().shuffle(1024, seed=hvd.rank()).batch(args.batch_size))

    model = build_model()
    # Horovod: scale the learning rate by the number of workers (the
    # effective batch is size times larger), wrap the optimizer.
    scaled_lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
    model.compile(optimizer=opt, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    callbacks = [
        # Horovod: start every rank from rank 0's weights.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average the epoch's metrics over ranks (before any callback reading them).
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: ramp the learning rate from scaled_lr / size up to scaled_lr.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs,
                                                 verbose=1 if hvd.rank() == 0 else 0),
    ]
    checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="hvd-keras-mnist-")
    # Horovod: save checkpoints only on worker 0, so others cannot corrupt them.
    if hvd.rank() == 0:
        callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "checkpoint-{epoch}.keras")))

    # Horovod: each rank takes steps_per_epoch / size steps per epoch.
    steps_per_epoch = max(1, args.train_samples // (args.batch_size * hvd.size()))
    model.fit(train, steps_per_epoch=steps_per_epoch, epochs=args.epochs, callbacks=callbacks,
              verbose=2 if hvd.rank() == 0 else 0)

    # Test accuracy over all ranks' shards, and a check that the replicas agree.
    _, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    accuracy = float(hvd.allreduce(accuracy, name="test_accuracy"))
    checksum = np.array([sum(float(np.sum(w, dtype=np.float64)) for w in model.get_weights())])
    checksums = np.asarray(hvd.allgather(checksum, name="weights_checksum"))
    if hvd.rank() == 0:
        print("test accuracy %.2f%%" % (100 * accuracy))
        print("checkpoints in %s: %s" % (checkpoint_dir, sorted(os.listdir(checkpoint_dir))))
        if np.all(checksums == checksums[0]):
            print("done: %d ranks trained identical replicas" % hvd.size())
        else:
            raise SystemExit("replicas differ: %s" % checksums)


if __name__ == "__main__":
    main()
