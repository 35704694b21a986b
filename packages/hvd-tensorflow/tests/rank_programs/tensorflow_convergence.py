# tensorflow_convergence.py - rank side of test_tensorflow_convergence.py:
# each rank trains on its shard of every batch with DistributedGradientTape
# (and SyncBatchNormalization in the model with batch norm), trains the
# single-process reference on the whole batches itself, and compares the
# weights. One program runs both cases (checklist.run_checks), so TensorFlow
# starts once per rank.
"""Rank programs for test_tensorflow_convergence.py."""

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from rank_programs import checklist, tensorflow_threads

tensorflow_threads.limit()

PER_RANK, STEPS = 8, 12

loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def mlp():
    tf.keras.utils.set_random_seed(1234)
    return tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(32, activation="tanh"),
                                tf.keras.layers.Dense(32, activation="tanh"), tf.keras.layers.Dense(3)])


def convnet(bn):
    # No conv bias: batch norm cancels it and its true gradient is 0, which
    # Adam would turn rounding noise into visible differences.
    tf.keras.utils.set_random_seed(4321)
    return tf.keras.Sequential([tf.keras.Input((12, 2)), tf.keras.layers.Conv1D(6, 3, padding="same", use_bias=False),
                                bn(momentum=0.9), tf.keras.layers.ReLU(), tf.keras.layers.Flatten(),
                                tf.keras.layers.Dense(3)])


def batches(in_shape):
    """The whole batches (all ranks' rows), the same on every rank."""
    g = np.random.RandomState(99)
    for _ in range(STEPS):
        yield (g.randn(PER_RANK * hvd.size(), *in_shape).astype(np.float32),
               g.randint(0, 3, PER_RANK * hvd.size()).astype(np.int64))


def train(model, opt, in_shape, distributed, in_function, tape_kwargs=None):
    """Trains `model` on every batch (this rank's shard of it when `distributed`); returns it."""
    rank = hvd.rank()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if distributed:
            tape = hvd.DistributedGradientTape(tape, **(tape_kwargs or {}))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    if in_function:
        step = tf.function(step)
    for x, y in batches(in_shape):
        if distributed:
            x, y = x[rank * PER_RANK:(rank + 1) * PER_RANK], y[rank * PER_RANK:(rank + 1) * PER_RANK]
        step(tf.constant(x), tf.constant(y))
    return model


def compare(a, b, what):
    """The largest weight difference between models `a` and `b`, which must be at most 1e-5."""
    worst = 0.0
    for va, vb in zip(a.weights, b.weights):
        diff = float(np.max(np.abs(va.numpy() - vb.numpy())))
        worst = max(worst, diff)
        assert diff <= 1e-5, (what, va.path, diff)
    return worst


def perturb_and_broadcast(model):
    # Ranks other than 0 start elsewhere; broadcasting rank 0's weights
    # before training is what makes the runs comparable.
    if hvd.rank() != 0:
        for v in model.weights:
            v.assign(v + 1.0)
    hvd.broadcast_variables(model.variables, root_rank=0)  # now rank 0's weights everywhere


def mlp_sgd_momentum_tf_function():
    ref = train(mlp(), tf.keras.optimizers.SGD(0.1, momentum=0.9), (10,), distributed=False, in_function=True)
    model = mlp()
    perturb_and_broadcast(model)
    train(model, tf.keras.optimizers.SGD(0.1, momentum=0.9), (10,), distributed=True, in_function=True)
    moved = max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(model.weights, mlp().weights))
    assert moved > 1e-2, "training did not move the weights"
    return {"worst": compare(model, ref, "mlp")}


def conv_sync_batch_norm_adam_eager_groups():
    ref = train(convnet(tf.keras.layers.BatchNormalization), tf.keras.optimizers.Adam(0.01), (12, 2),
                distributed=False, in_function=False)
    model = convnet(hvd.SyncBatchNormalization)
    perturb_and_broadcast(model)
    train(model, tf.keras.optimizers.Adam(0.01), (12, 2), distributed=True, in_function=False,
          tape_kwargs=dict(groups=2))
    return {"worst": compare(model, ref, "conv")}


def both_models():
    """Trains both models; returns {case: {"worst": largest difference} or the failure's traceback}."""
    hvd.init()
    return checklist.run_checks([mlp_sgd_momentum_tf_function, conv_sync_batch_norm_adam_eager_groups])
