# keras_elastic_fit.py - model.fit with hvd's elastic Keras callbacks, run by
# test_keras.py under horovodrun: a worker may kill itself in a given epoch,
# and discovery may add a host, whose new worker must get through its first
# broadcast (Horovod issue 2652: it hung there).
"""Elastic Keras training script for hvd-elastic's tests (run under horovodrun)."""

import argparse
import json
import os
import signal
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--kill-at-epoch", type=int, default=None, help="rank 1 kills itself once in this epoch")
    parser.add_argument("--hosts-file", default=None)
    parser.add_argument("--add-hosts-at-epoch", type=int, default=None)
    parser.add_argument("--add-hosts", default="", help="lines for --hosts-file, ',' separated")
    args = parser.parse_args()

    hvd.init()
    keras = tf.keras
    keras.utils.set_random_seed(11 + hvd.rank())  # different initial weights: only the sync makes them equal
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.02)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.RandomState(5)
    x, y = rng.rand(96, 6).astype(np.float32), rng.randint(0, 3, 96)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    me = "%s.%d" % (os.environ.get("HOROVOD_HOSTNAME"), os.getpid())

    def record(event, **values):
        values.update(event=event, worker=me, host=os.environ.get("HOROVOD_HOSTNAME"), rank=hvd.rank(),
                      size=hvd.size(), time=time.time())
        with open(os.path.join(args.log, me + ".jsonl"), "a") as f:
            f.write(json.dumps(values) + "\n")

    def once(name):
        try:
            os.close(os.open(os.path.join(args.log, "once." + name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    class Events(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if state.epoch == args.add_hosts_at_epoch and hvd.rank() == 0 and once("add"):
                with open(args.hosts_file + ".tmp", "w") as f:
                    f.write(args.add_hosts.replace(",", "\n") + "\n")
                os.replace(args.hosts_file + ".tmp", args.hosts_file)

        def on_batch_end(self, batch, logs=None):
            time.sleep(0.02)
            if state.epoch == args.kill_at_epoch and batch == 3 and hvd.rank() == 1 and once("kill"):
                record("failing")
                os.kill(os.getpid(), signal.SIGKILL)

        def on_epoch_end(self, epoch, logs=None):
            record("epoch", epoch=state.epoch)

    @hvd.elastic.run
    def train(state):
        record("start", epoch=state.epoch)
        callbacks = [hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state),
                     hvd.elastic.CommitStateCallback(state, batches_per_commit=2), Events()]
        # UpdateEpochStateCallback counts from the epoch the state had when fit
        # began, so fit runs only the epochs that are left (Horovod's pattern).
        model.fit(x, y, batch_size=8, epochs=args.epochs - state.epoch, callbacks=callbacks, verbose=0)

    train(state)
    record("done", epoch=state.epoch, weights=[w.ravel().tolist() for w in model.get_weights()])


if __name__ == "__main__":
    main()
