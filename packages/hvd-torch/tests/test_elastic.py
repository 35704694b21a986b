# test_elastic.py - horovod.torch's elastic worker side on real ranks:
# TorchState, ElasticSampler and @hvd.elastic.run recovering from a real
# engine failure in the middle of a DistributedOptimizer step.
# The rank side is rank_programs/elastic.py.
import pytest

import torch_ranks


def run_scenario(name, size=2, env=None, timeout=90):
    env = dict(env or {}, OMP_NUM_THREADS="1")
    return torch_ranks.run_program_ok(size, "elastic:" + name, env=env, timeout=timeout, cwd=torch_ranks.HERE)


def test_torch_state_syncs_model_optimizer_and_values_and_rolls_back():
    results = run_scenario("torch_state_sync_restore_commit")
    for res in results:
        assert set(res["sync_model"]) == {1.0}  # rank 0's weights
        assert res["sync_lr"] == 0.1
        assert res["sync_plain"] == [10, "rank 0"]
        assert set(res["restore_model"]) == {1.0}
        assert res["restore_momentum"] == 0  # the step's momentum buffers are gone again
        assert res["restore_epoch"] == 10
        assert res["commit_restore_matches"] is True
        assert res["commit_restore_momentum"] > 0
        assert res["commit_restore_epoch"] == 11
        assert res["replacement_restored"] is True


# Under HOROVOD_AUTOTUNE the optimizer also asks the tuner for its bucket
# size after every step, in a collective of its own, which fails with the
# engine like the gradients' and starts over with the next engine.
@pytest.mark.parametrize("autotune", ["0", "1"])
def test_elastic_run_resumes_from_the_last_commit_after_an_engine_failure(autotune):
    results = run_scenario("run_recovers_from_a_failure_mid_training",
                           env={"HOROVOD_PEER_TIMEOUT_SECONDS": "1", "HOROVOD_AUTOTUNE": autotune,
                                "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "1"})
    for res in results:
        assert res["starts"] == [0, 4]
        assert res["lr_sizes"] == [2]
        assert res["same_on_all_ranks"] is True
        assert res["max_diff_to_reference"] < 1e-6


def test_elastic_sampler_continues_the_epoch_without_repeating_samples():
    results = run_scenario("elastic_sampler_resumes_the_epoch_on_all_ranks")
    for res in results:
        assert res["epoch"] == 1
        assert res["processed"] == 12  # 3 committed batches of 2 on each of 2 ranks
        assert res["length"] == 14
    seen = [i for part in results[0]["seen"] for i in part]
    rest = [i for part in results[0]["rest"] for i in part]
    assert len(seen) == 12 and len(rest) == 28
    assert sorted(seen + rest) == list(range(40))
