# test_keras.py - horovod.tensorflow.keras (and horovod.keras) at 2 real
# ranks, once on Keras 3 (tf.keras's default) and once on tf-keras
# (TF_USE_LEGACY_KERAS=1): model.fit with DistributedOptimizer and every
# callback must be the same computation as 1-process training on the
# concatenated batches (every rank trains that reference itself and
# compares, to 1e-5), replicas must end identical, metrics averaged, the
# learning rate must follow Horovod's warmup/schedule formulas, only rank 0
# writes checkpoints, load_model re-wraps the optimizer. One launch per
# Keras checks all of it: a TF process start costs seconds. The rank side
# is rank_programs/keras_fit.py.
import os
import sys

import pytest

from horovod.common import testing

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "keras")

def _check_run(results, flavour):
    size = len(results)
    steps, epochs, warmup = 6, 3, 2
    lr0 = 0.05 * size
    for r, out in enumerate(results):
        assert out["wrapped"][1], out["wrapped"]
        # data-parallel == 1-process training on the concatenated batches
        assert out["mlp_vs_ref"] < 1e-5, (r, out["mlp_vs_ref"])
        assert out["embedding_vs_ref"] < 1e-5, (r, out["embedding_vs_ref"])
        assert out["bpps_vs_ref"] < 1e-5, (r, out["bpps_vs_ref"])
        assert out["bpps_iterations"] == steps  # every pass counts, as in Horovod
        assert out["bpps_agg_counter"] == steps % 2 and out["no_agg_helper"]

        # Horovod's warmup: initial_lr / size -> initial_lr over `warmup`
        # epochs (one step ahead), then the schedule's constant 0.5.
        expected = []
        for e in range(epochs):
            for b in range(steps):
                if e < warmup:
                    epoch = e + b / steps + 1.0 / steps
                    expected.append(lr0 / size * (epoch * (size - 1) / warmup + 1))
                else:
                    expected.append(lr0 * 0.5)
        assert out["lrs"] == pytest.approx(expected, rel=1e-6), (r, out["lrs"])
        assert out["ref_lrs"] == pytest.approx(expected, rel=1e-6)
        if flavour == "tf_keras":
            # legacy SGD keeps momentum in a variable: corrected for the step
            # the learning rate changes (new/old), restored afterwards
            assert out["moms"][0] == pytest.approx(0.9 * expected[0] / lr0, rel=1e-5), out["moms"][:3]
            assert out["moms"][1] == pytest.approx(0.9 * expected[1] / expected[0], rel=1e-5)
            assert out["final_momentum"] == pytest.approx(0.9)
            assert not out["momentum_warning"]
        else:
            assert out["momentum_warning"]  # Keras 3 momentum is a Python float: skipped, said so

        # metrics: every rank sees the mean over ranks
        for epoch in range(epochs):
            for key in ("loss", "val_loss"):
                mean = sum(o["raw_logs"][epoch][key] for o in results) / size
                assert out["avg_logs"][epoch][key] == pytest.approx(mean, rel=1e-6), (r, epoch, key)
        assert results[0]["raw_logs"][0]["val_loss"] != results[1]["raw_logs"][0]["val_loss"]

        # BestModelCheckpoint writes on rank 0 only; load_model re-wraps
        assert out["ckpt_exists"] == (r == 0)
        assert out["loaded_optimizer"][1], out["loaded_optimizer"]
        assert 0 < out["loaded_optimizer"][2] <= epochs * steps
        assert out["allreduce"] == pytest.approx(0.5)
        assert out["allgather"] == [[0, 0], [1, 1]]
        assert out["broadcast"] == 6
        assert out["reducescatter"] == pytest.approx([0.0, 1.5] if r == 0 else [3.0, 4.5])
        assert out["errors"] == [True, True, True]
        assert out["eager_apply"] == pytest.approx([0.5, -0.5])
        assert out["bcast_local_kept"]
        if flavour == "tf_keras":
            assert out["legacy_computed"] == pytest.approx([3.0, 3.0])  # 1 + 2, summed once
            assert out["legacy_applied"] == pytest.approx([-5.0, -5.0])  # two steps of 3, not 6
            assert out["new_computed"] == pytest.approx([3.0, 3.0])
            assert out["new_applied"] == pytest.approx([-5.0, -5.0])
            assert out["partial_tf_keras_layers"] is True
    # replicas identical
    assert results[0]["mlp_weights"] == results[1]["mlp_weights"]
    assert results[0]["loaded_weights"] == results[1]["loaded_weights"]
    assert results[0]["partial_global"] == results[1]["partial_global"]
    assert results[0]["partial_local"] != results[1]["partial_local"]
    assert results[0]["bcast_global"] == results[1]["bcast_global"]
    assert results[0]["bcast_local"] != results[1]["bcast_local"]


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_fit_with_distributed_optimizer_and_callbacks_matches_single_process(flavour, tmp_path, tf_ranks):
    env = {"TF_USE_LEGACY_KERAS": "1"} if flavour == "tf_keras" else {}
    results = tf_ranks.run_program_ok(2, "keras_fit:fit_and_compare_with_single_process",
                                      kwargs={"flavour": flavour, "checkpoint_dir": str(tmp_path)},
                                      timeout=240, env=env)
    expected_module = "tf_keras" if flavour == "tf_keras" else "keras._tf_keras"
    assert all(out["keras"].startswith(expected_module) for out in results), results[0]["keras"]
    _check_run(results, flavour)


def test_keras_mnist_example_trains_identical_replicas_under_horovodrun(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3",
               CUDA_VISIBLE_DEVICES="")
    result = testing.horovodrun("-np", "2", sys.executable, os.path.join(EXAMPLES, "keras_mnist.py"), "--epochs", "2",
                                "--train-samples", "4096", "--test-samples", "512", "--checkpoint-dir", str(tmp_path),
                                env=env, timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "done: 2 ranks trained identical replicas" in out, out
    assert "finished gradual learning rate warmup" in out, out
    assert float(out.split("test accuracy ")[1].split("%")[0]) > 50.0, out  # chance is 10%
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-1.keras", "checkpoint-2.keras"]
