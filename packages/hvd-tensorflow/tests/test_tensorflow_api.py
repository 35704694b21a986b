# test_tensorflow_api.py - horovod.tensorflow's collectives and helpers on 2
# real ranks: every function eagerly and inside tf.function, gradients of the
# collectives through tf.GradientTape, variable and object broadcasts,
# SyncBatchNormalization against BatchNormalization on the concatenated
# batch, TF1 graph mode (BroadcastGlobalVariablesHook, sessions), and
# cross-rank mismatches raising FailedPreconditionError on every rank. The
# rank side is rank_programs/tensorflow_api.py.
import functools
import importlib.util

import pytest

from conftest import assert_ok


@functools.lru_cache(maxsize=None)
def _reports(tf_ranks):
    return tf_ranks.run_program_ok(2, "tensorflow_api:every_check", timeout=240)


@pytest.fixture(scope="module")
def reports(tf_ranks):
    return _reports(tf_ranks)


@pytest.mark.parametrize("check", [
    "api_surface", "allreduce_ops_and_dtypes", "allreduce_compression", "allreduce_indexed_slices",
    "grouped_allreduce_mixed", "allgather_and_grouped", "broadcast_and_inplace", "alltoall", "reducescatter",
    "join_barrier_topology_ops", "gradients", "broadcast_variables", "objects", "sync_batch_norm",
    "tf1_graph_mode"])
def test_api_on_two_ranks(reports, check):
    assert_ok(reports, check)


def test_mismatched_collectives_raise_failed_precondition_on_every_rank(reports):
    for rank, report in enumerate(reports):
        result = report["mismatch_raises_failed_precondition"]
        assert isinstance(result, dict), "rank %d: %s" % (rank, result)
        assert result and all(v == "ok" for v in result.values()), "rank %d: %s" % (rank, result)


def test_sync_batch_norm_with_tf_keras(tf_ranks):
    # TF_USE_LEGACY_KERAS=1: tf.keras is tf-keras (Keras 2), whose
    # BatchNormalization computes moments with another signature.
    if importlib.util.find_spec("tf_keras") is None:  # find_spec: importing it would load TF here
        pytest.skip("tf-keras is not installed")
    reports = tf_ranks.run_program_ok(2, "tensorflow_api:sync_batch_norm_on_tf_keras",
                                      env={"TF_USE_LEGACY_KERAS": "1"})
    assert_ok(reports, "sync_batch_norm_tf_keras")
