# test_examples.py - the runnable examples are end-to-end tests: the README's
# quick-start job, launched exactly as a user would.
import os
import sys

import pytest

from launch_harness import horovodrun

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples")


@pytest.mark.engine
@pytest.mark.parametrize("np_", [2, 3])
def test_numpy_training_example_trains_identical_replicas(np_):
    script = os.path.join(EXAMPLES, "numpy", "train_logistic_regression.py")
    result = horovodrun("-np", str(np_), sys.executable, script, "--epochs", "3", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done: %d ranks trained identical replicas" % np_ in result.stdout, result.stdout
