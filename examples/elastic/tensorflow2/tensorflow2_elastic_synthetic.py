# tensorflow2_elastic_synthetic.py - elastic training with horovod.tensorflow
# (TensorFlow 2, eager, Keras 3 or tf-keras) on made-up data, so it runs
# anywhere and offline. Workers may leave and join while it trains (hosts
# come from discover_hosts.sh); the Keras model and optimizer, the epoch and
# the batch live in an hvd.elastic.TensorFlowKerasState, so after every
# change of membership training resumes where it was:
#
#     horovodrun -np 2 --min-np 1 --max-np 2 \
#         --host-discovery-script ./discover_hosts.sh \
#         python tensorflow2_elastic_synthetic.py
#
# Rank 0 prints one line per epoch: the epoch, how many workers there were
# at its end, and the loss on held-out points.
"""Elastic horovod.tensorflow training of a small classifier on synthetic data."""

import argparse
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=20, help="epochs to train")
    parser.add_argument("--batches-per-epoch", type=int, default=32,
                        help="batches each worker trains per epoch, whatever the number of workers")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per batch on each worker")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one worker")
    parser.add_argument("--commit-every", type=int, default=4,
                        help="batches between commits (what a failure can lose, against the cost of a copy)")
    parser.add_argument("--step-delay", type=float, default=0.05,
                        help="seconds to pause after each batch: stands in for a real model's compute, so that "
                             "there is time to watch (or cause) workers leaving and joining; 0 for full speed")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def synthetic_data(samples=4096, features=20, classes=4, seed=0):
    """Points labelled by a fixed random linear "teacher": learnable, and the same on every
    worker. Returns the training set and 512 held-out points to measure the loss on."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples + 512, features)).astype(np.float32)
    teacher = rng.standard_normal((features, classes)).astype(np.float32)
    y = (x @ teacher + 0.1 * rng.standard_normal((len(x), classes))).argmax(axis=1).astype(np.int64)
    return (x[:samples], y[:samples]), (x[samples:], y[samples:])


def batch_for(x, y, seed, epoch, batch, rank, batch_size):
    """This worker's batch: drawn from (epoch, batch, rank), so a worker that joins
    later, or a resumed epoch, picks up exactly where the job is."""
    rng = np.random.default_rng([seed, epoch, batch, rank])
    index = rng.integers(0, len(x), size=batch_size)
    return x[index], y[index]


def main():
    args = parse_args()
    hvd.init()
    # Several workers may share one small machine; one thread each keeps them
    # from fighting over its cores.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.keras.utils.set_random_seed(args.seed)

    (x, y), (eval_x, eval_y) = synthetic_data()
    classes = int(y.max()) + 1
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(x.shape[1],)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(classes),
    ])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tf.keras.optimizers.SGD(learning_rate=args.lr * hvd.size(), momentum=0.9)
    # Keras creates an optimizer's slots on its first step. Creating them now
    # gives every worker, including one that joins a running job, the same
    # variables for rank 0 to broadcast into.
    optimizer.build(model.trainable_variables)

    @tf.function
    def train_step(features, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(features, training=True))
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    def on_reset():
        # The gradients are averaged over hvd.size() workers, so the step
        # follows the number of workers, as it did at the start.
        optimizer.learning_rate.assign(args.lr * hvd.size())

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        # Re-entered after every reset: everything needed to go on is in state.
        while state.epoch < args.epochs:
            while state.batch < args.batches_per_epoch:
                features, labels = batch_for(x, y, args.seed, state.epoch, state.batch, hvd.rank(),
                                             args.batch_size)
                train_step(features, labels)
                if args.step_delay:
                    time.sleep(args.step_delay)

                state.batch += 1
                if state.batch % args.commit_every == 0:
                    state.commit()

            if hvd.rank() == 0:
                # Every worker holds the same model: one of them can measure it.
                loss = float(loss_fn(eval_y, model(eval_x, training=False)))
                print(f"epoch {state.epoch}: size {hvd.size()}, loss {loss:.4f}", flush=True)
            state.epoch += 1
            state.batch = 0
            state.commit()

    train(state)
    if hvd.rank() == 0:
        print(f"done: {args.epochs} epochs, {hvd.size()} worker(s) at the end", flush=True)


if __name__ == "__main__":
    main()
