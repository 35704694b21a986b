# test_tensorflow_convergence.py - data-parallel training must be the same
# computation as single-process training on the whole batch: 2 ranks, each
# with its shard of every batch, averaging gradients with
# DistributedGradientTape (and SyncBatchNormalization in the model with batch
# norm), end with the weights one process gets on the concatenated batches
# from the same seed. Every rank runs that single-process reference itself
# and compares (to 1e-5); the rank side is
# rank_programs/tensorflow_convergence.py. Plus the TF2 example, launched
# with horovodrun.
import os
import subprocess
import sys

from conftest import RANK_ENV

def test_data_parallel_training_equals_single_process_on_the_whole_batch(tf_ranks):
    reports = tf_ranks.run_program_ok(2, "tensorflow_convergence:both_models", timeout=240)
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
