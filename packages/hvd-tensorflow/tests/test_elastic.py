# test_elastic.py - horovod.tensorflow's elastic worker side on real ranks:
# TensorFlowState in eager and graph mode, and model.fit under
# @hvd.elastic.run with the Keras elastic callbacks recovering from a real
# engine failure, on Keras 3 and on tf-keras. The rank side is
# rank_programs/elastic.py.
import pytest

import op_ranks


def run_scenario(name, env=None, timeout=180):
    # op_ranks.ENV: TensorFlow quiet, one OpenMP thread
    return op_ranks.run_program_ok(2, "elastic:" + name, env=env, timeout=timeout)


def test_tensorflow_state_eager_syncs_restores_and_commits():
    for res in run_scenario("tensorflow_state_eager"):
        assert res["sync"] == [[[1.0, 1.0], [1.0, 1.0]], [1.0, 1.0, 1.0]]
        assert res["sync_epoch"] == 10
        assert res["restore"] == res["sync"]  # the sync is what a restore goes back to
        assert res["restore_epoch"] == 10
        assert res["commit_restore"] == [[[3.0, 3.0], [3.0, 3.0]], [3.0, 3.0, 3.0]]
        assert res["commit_restore_epoch"] == 11


def test_tensorflow_state_in_graph_mode_uses_the_session():
    for res in run_scenario("tensorflow_state_graph"):
        assert res["sync"] == [1.0] * 4
        assert res["sync_step"] == 0
        assert res["restore"] == [1.0] * 4
        assert res["commit_restore"] == [2.0] * 4  # the committed value, one bump after the restore
        assert res["commit_restore_step"] == 1


@pytest.mark.parametrize("legacy_keras", [False, True], ids=["keras3", "tf_keras"])
def test_keras_fit_under_elastic_run_recovers_from_an_engine_failure(legacy_keras):
    env = {"HOROVOD_PEER_TIMEOUT_SECONDS": "1"}
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    results = run_scenario("keras_fit_recovers_from_a_failure", env=env)
    for res in results:
        assert res["keras"].startswith("tf_keras") == legacy_keras, res["keras"]
        # The first fit fails in epoch 1; the second resumes there (the last
        # commit) and runs the remaining epochs.
        assert res["fit_starts"] == [0, 1]
        assert res["epoch"] == 3
        assert res["same_on_all_ranks"] is True
