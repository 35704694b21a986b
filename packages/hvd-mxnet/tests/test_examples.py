# test_examples.py - examples/mxnet is an end-to-end test: launched with
# horovodrun on 2 ranks exactly as a user would, with a small data set.
import os
import sys

from horovod.common import testing

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "mxnet")


def test_gluon_mnist_example_learns_and_keeps_identical_replicas():
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1")
    result = testing.horovodrun("-np", "2", sys.executable, os.path.join(EXAMPLES, "gluon_mnist.py"),
                                "--epochs", "2", "--train-samples", "2048", "--test-samples", "512",
                                env=env, timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "done: 2 ranks trained identical replicas" in out, out
    accuracy = float(out.split("test accuracy ")[-1].split("%")[0])
    assert accuracy > 30.0, out  # chance is 10%: it learns
