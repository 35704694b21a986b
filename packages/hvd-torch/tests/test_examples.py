# test_examples.py - the PyTorch examples are end-to-end tests: launched with
# horovodrun on 2 ranks exactly as a user would, with few steps.
import os
import sys

from horovod.common import testing

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "pytorch")


def horovodrun(*args, timeout=180):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return testing.horovodrun(*args, env=env, timeout=timeout)


def test_mnist_example_trains_identical_replicas():
    result = horovodrun("-np", "2", sys.executable, os.path.join(EXAMPLES, "pytorch_mnist.py"),
                        "--epochs", "2", "--train-samples", "2048", "--test-samples", "512")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "done: 2 ranks trained identical replicas" in out, out
    accuracy = float(out.split("test accuracy ")[1].split("%")[0])
    assert accuracy > 30.0, out  # chance is 10%: it learns


def test_synthetic_benchmark_example_runs():
    result = horovodrun("-np", "2", sys.executable, os.path.join(EXAMPLES, "pytorch_synthetic_benchmark.py"),
                        "--num-warmup-batches", "1", "--num-iters", "2", "--num-batches-per-iter", "1",
                        "--batch-size", "4", "--image-size", "32", "--fp16-allreduce")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Total img/sec on 2 CPU(s):" in out, out
