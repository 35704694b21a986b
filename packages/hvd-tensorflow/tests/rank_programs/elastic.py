# elastic.py - rank side of test_elastic.py: TensorFlowState (eager and
# tf.compat.v1 graph mode), KerasState and model.fit under @hvd.elastic.run
# with the elastic callbacks. Each scenario returns what the test checks.
# TF_USE_LEGACY_KERAS in the rank's environment picks tf-keras.
"""Rank programs for hvd-tensorflow's test_elastic.py."""

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from rank_programs import tensorflow_threads

tensorflow_threads.limit()


def _values(variables):
    return [np.asarray(v).tolist() for v in variables]


def tensorflow_state_eager():
    """TensorFlowState over eager variables: sync, restore, commit; returns what each step left."""
    hvd.init()
    rank = hvd.rank()
    variables = [tf.Variable(np.full((2, 2), 1.0 + rank)), tf.Variable(np.full(3, 1.0 + rank, np.float32))]
    state = hvd.elastic.TensorFlowState(variables, epoch=10 + rank)
    state.sync()
    out = {"sync": _values([v.numpy() for v in variables]), "sync_epoch": state.epoch}
    for v in variables:
        v.assign_add(tf.ones_like(v) * 5)
    state.epoch = 50
    state.restore()
    out["restore"] = _values([v.numpy() for v in variables])
    out["restore_epoch"] = state.epoch
    for v in variables:
        v.assign(tf.ones_like(v) * 3)
    state.epoch = 11
    state.commit()
    for v in variables:
        v.assign(tf.zeros_like(v))
    state.restore()
    out["commit_restore"] = _values([v.numpy() for v in variables])
    out["commit_restore_epoch"] = state.epoch
    return out


def tensorflow_state_graph():
    """TensorFlowState over a tf.compat.v1 session's global variables; returns what each step left."""
    tf.compat.v1.disable_eager_execution()
    hvd.init()
    rank = hvd.rank()
    variable = tf.compat.v1.get_variable("w", initializer=np.full(4, 1.0 + rank, np.float32))
    bump = variable.assign_add(tf.ones(4))
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        state = hvd.elastic.TensorFlowState(session=session, step=rank)  # every global variable
        state.sync()
        out = {"sync": session.run(variable).tolist(), "sync_step": state.step}
        session.run(bump)
        state.step = 7
        state.restore()
        out["restore"] = session.run(variable).tolist()
        session.run(bump)
        state.step = 1
        state.commit()
        session.run(bump)
        state.restore()
        out["commit_restore"] = session.run(variable).tolist()
        out["commit_restore_step"] = state.step
    return out


def keras_fit_recovers_from_a_failure():
    """model.fit under @hvd.elastic.run with the elastic callbacks; in the first
    attempt the ranks diverge (a real engine failure) in epoch 1. The retry
    resumes from the last commit and every rank ends with the same weights."""
    import horovod.tensorflow.keras as hvd_keras
    keras = tf.keras
    hvd_keras.init()
    rank = hvd_keras.rank()
    keras.utils.set_random_seed(7 + rank)  # different initial weights: the sync must fix that
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(2)])
    optimizer = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.05))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.RandomState(0)
    x, y = rng.rand(64, 4).astype(np.float32), rng.randint(0, 2, 64)
    state = hvd_keras.elastic.KerasState(model, batch=0, epoch=0)
    fit_starts = []

    class FailOnce(keras.callbacks.Callback):
        def on_batch_end(self, batch, logs=None):
            if len(fit_starts) == 1 and state.epoch == 1 and batch == 2:
                # Eager ops are matched by op type (TF drops their names):
                # different ops on the two ranks diverge.
                if rank == 0:
                    hvd.allreduce(tf.zeros(1))
                else:
                    hvd.allgather(tf.zeros(1))

    @hvd_keras.elastic.run
    def train(state):
        fit_starts.append(state.epoch)
        callbacks = [hvd_keras.elastic.UpdateBatchStateCallback(state),
                     hvd_keras.elastic.UpdateEpochStateCallback(state),
                     hvd_keras.elastic.CommitStateCallback(state, batches_per_commit=2),
                     FailOnce()]
        model.fit(x, y, batch_size=8, epochs=3 - state.epoch, callbacks=callbacks, verbose=0)

    train(state)
    weights = [w.tolist() for w in model.get_weights()]
    gathered = hvd.allgather_object(weights)
    return {"keras": keras.__name__, "fit_starts": fit_starts, "epoch": state.epoch,
            "same_on_all_ranks": all(g == weights for g in gathered)}
