# test_autotune.py - HOROVOD_AUTOTUNE on a real 2-rank job: rank 0 writes the
# log with Horovod's columns, the settings it tries stay within the search's
# bounds, and every step's result stays exact on every rank while they
# change. What the ranks run is in rank_programs/autotune.py.
import csv

import ranks

COLUMNS = ["hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce", "cache_enabled", "cycle_time_ms",
           "tensor_fusion_threshold", "score"]


def test_autotune_logs_each_sample_and_keeps_every_rank_exact(tmp_path):
    log = tmp_path / "autotune.csv"
    steps = 120
    results = ranks.run_program_ok(2, "autotune:steps_of_four_gradients", kwargs={"steps": steps}, env={
        "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": str(log), "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
        "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6"}, timeout=240)
    assert results == [steps, steps]
    with open(log) as f:
        rows = list(csv.reader(f))
    assert rows[0] == COLUMNS
    samples = [dict(zip(COLUMNS, map(float, row))) for row in rows[1:]]
    # 6 settings of fusion threshold and cycle time, the cache the other way, then the best again.
    assert len(samples) == 8, samples
    defaults = samples[0]
    assert defaults["tensor_fusion_threshold"] == 128 and defaults["cycle_time_ms"] == 1  # hvd's defaults first
    knobs = ("tensor_fusion_threshold", "cycle_time_ms")
    for s in samples[1:]:
        # The search's points lie within its bounds; the last two rows (the
        # best with the cache the other way, then the best) may be the
        # defaults' knobs when the defaults scored best.
        assert 0 <= s["tensor_fusion_threshold"] <= 64 or [s[k] for k in knobs] == [defaults[k] for k in knobs], s
        assert 1 <= s["cycle_time_ms"] <= 100, s
        assert s["score"] > 0, s
    assert [s["cache_enabled"] for s in samples[:6]] == [1] * 6
    assert samples[6]["cache_enabled"] == 0
    best = samples[7]
    assert best["score"] == max(s["score"] for s in samples[:7])


def test_bad_autotune_setting_is_a_clear_error():
    results = ranks.run_program(1, "autotune:steps_of_four_gradients", kwargs={"steps": 1},
                                env={"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "0"}, timeout=60)
    assert results[0].returncode != 0
    assert "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE must be at least 1" in results[0].stderr
