# test_tensorflow_convergence.py - data-parallel training must be the same
# computation as single-process training on the whole batch: 2 ranks, each
# with its shard of every batch, averaging gradients with
# DistributedGradientTape (and SyncBatchNormalization in the model with batch
# norm), end with the weights one process gets on the concatenated batches
# from the same seed. Every rank runs that single-process reference itself
# and compares (to 1e-5). Plus the TF2 example, launched with horovodrun.
import os
import subprocess
import sys

from conftest import RANK_ENV

CONVERGENCE = r"""
PER_RANK, STEPS = 8, 12

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
    g = np.random.RandomState(99)
    for _ in range(STEPS):
        yield (g.randn(PER_RANK * size, *in_shape).astype(np.float32),
               g.randint(0, 3, PER_RANK * size).astype(np.int64))

loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

def train(model, opt, in_shape, distributed, in_function, tape_kwargs=None):
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
    worst = 0.0
    for va, vb in zip(a.weights, b.weights):
        diff = float(np.max(np.abs(va.numpy() - vb.numpy())))
        worst = max(worst, diff)
        assert diff <= 1e-5, (what, va.path, diff)
    return worst

def perturb_and_broadcast(model):
    # Ranks other than 0 start elsewhere; broadcasting rank 0's weights
    # before training is what makes the runs comparable.
    if rank != 0:
        for v in model.weights:
            v.assign(v + 1.0)
    hvd.broadcast_variables(model.variables, root_rank=0)  # now rank 0's weights everywhere

@check("mlp_sgd_momentum_tf_function")
def _():
    ref = train(mlp(), tf.keras.optimizers.SGD(0.1, momentum=0.9), (10,), distributed=False, in_function=True)
    model = mlp()
    perturb_and_broadcast(model)
    train(model, tf.keras.optimizers.SGD(0.1, momentum=0.9), (10,), distributed=True, in_function=True)
    moved = max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(model.weights, mlp().weights))
    assert moved > 1e-2, "training did not move the weights"
    return {"worst": compare(model, ref, "mlp")}

@check("conv_sync_batch_norm_adam_eager_groups")
def _():
    ref = train(convnet(tf.keras.layers.BatchNormalization), tf.keras.optimizers.Adam(0.01), (12, 2),
                distributed=False, in_function=False)
    model = convnet(hvd.SyncBatchNormalization)
    perturb_and_broadcast(model)
    train(model, tf.keras.optimizers.Adam(0.01), (12, 2), distributed=True, in_function=False,
          tape_kwargs=dict(groups=2))
    return {"worst": compare(model, ref, "conv")}

print(json.dumps(report))
"""


def test_data_parallel_training_equals_single_process_on_the_whole_batch(tf_ranks):
    reports = tf_ranks.run_ok(2, CONVERGENCE, timeout=240)
    for rank, report in enumerate(reports):
        for case in ("mlp_sgd_momentum_tf_function", "conv_sync_batch_norm_adam_eager_groups"):
            result = report[case]
            assert isinstance(result, dict), "rank %d, %s:\n%s" % (rank, case, result)
            assert result["worst"] <= 1e-5, (rank, case, result)


EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "tensorflow2")


def test_mnist_example_trains_identical_replicas(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", **RANK_ENV)
    result = subprocess.run([sys.executable, "-m", "horovod.runner", "-np", "2", sys.executable,
                             os.path.join(EXAMPLES, "tensorflow2_mnist.py"), "--steps", "120",
                             "--checkpoint-dir", str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "done: 2 ranks trained identical replicas" in out, out
    assert (tmp_path / "mnist.weights.h5").exists(), out  # written by rank 0
    accuracy = float(out.split("test accuracy ")[1].split("%")[0])
    assert accuracy > 30.0, out  # chance is 10%: it learns
