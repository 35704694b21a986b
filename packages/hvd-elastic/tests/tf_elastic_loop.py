# tf_elastic_loop.py - a TensorFlow 2 custom training loop (tf.function step,
# DistributedGradientTape) with TensorFlowKerasState, run by test_keras.py
# under horovodrun. The optimizer is left unbuilt, as most scripts leave it:
# rank 0 adds a host at step 3, and the new worker - whose optimizer has no
# slot variables yet - must get through its first sync (Horovod issue 2652).
"""Elastic TensorFlow training script for hvd-elastic's tests (run under horovodrun)."""

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--hosts-file", required=True)
    parser.add_argument("--add-hosts", required=True, help="lines for --hosts-file, ',' separated")
    parser.add_argument("--final-size", type=int, required=True)
    args = parser.parse_args()

    hvd.init()
    keras = tf.keras
    keras.utils.set_random_seed(21 + hvd.rank())
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)  # momentum: slot variables, created lazily
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=0)
    rng = np.random.RandomState(9)
    x, y = rng.rand(32, 5).astype(np.float32), rng.rand(32, 1).astype(np.float32)

    @tf.function
    def train_step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    starts = []

    @hvd.elastic.run
    def train(state):
        starts.append((state.step, hvd.size()))
        while state.step < 10 or (hvd.size() < args.final_size and state.step < 1000):
            train_step(x, y)
            state.step += 1
            if state.step == 3 and hvd.rank() == 0 and not os.path.exists(args.hosts_file + ".added"):
                open(args.hosts_file + ".added", "w").close()
                with open(args.hosts_file + ".tmp", "w") as f:
                    f.write(args.add_hosts.replace(",", "\n") + "\n")
                os.replace(args.hosts_file + ".tmp", args.hosts_file)
            time.sleep(0.05)
            state.commit()

    train(state)
    with open(os.path.join(args.log, "%d.jsonl" % os.getpid()), "a") as f:
        f.write(json.dumps({"event": "done", "host": os.environ.get("HOROVOD_HOSTNAME"), "rank": hvd.rank(),
                            "size": hvd.size(), "starts": starts, "time": time.time(),
                            "weights": [w.ravel().tolist() for w in model.get_weights()]}) + "\n")


if __name__ == "__main__":
    main()
