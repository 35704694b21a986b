# test_tensorflow_optimizer.py - DistributedGradientTape,
# PartialDistributedGradientTape and DistributedOptimizer (tf.compat.v1
# optimizers, eager and graph mode, backward_passes_per_step) on 2 real
# ranks: every reduced gradient must equal what the ranks' local gradients
# give when averaged (or summed) by hand, computed from allgathered values.
# One launch runs every check; the rank side is
# rank_programs/tensorflow_optimizer.py.
import functools

import pytest

from conftest import assert_ok


@functools.lru_cache(maxsize=None)
def _reports(tf_ranks):
    return tf_ranks.run_program_ok(2, "tensorflow_optimizer:every_check", timeout=240)


@pytest.fixture(scope="module")
def reports(tf_ranks):
    return _reports(tf_ranks)


@pytest.mark.parametrize("check", [
    "tape_average_eager_and_function", "tape_options", "tape_groups_by_variable_and_structures",
    "partial_tape_local_layers", "legacy_optimizer_eager", "legacy_optimizer_graph_mode",
    "legacy_optimizer_backward_passes_per_step", "legacy_optimizer_adasum", "eager_aggregation_helper"])
def test_optimizer_on_two_ranks(reports, check):
    assert_ok(reports, check)


def test_keras_optimizer_dispatches_to_horovod_tensorflow_keras(reports):
    outcome = reports[0]["keras_dispatch"]
    if outcome.startswith("skipped"):
        pytest.skip(outcome)
    assert_ok(reports, "keras_dispatch")
