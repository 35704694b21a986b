# test_autotune.py - HOROVOD_AUTOTUNE on a real 2-rank job: rank 0 writes the
# log with Horovod's columns, the settings it tries stay within the search's
# bounds, and every step's result stays exact on every rank while they
# change. What the ranks run is in rank_programs/autotune.py.
import csv
import re

import pytest

import ranks

COLUMNS = ["hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce", "cache_enabled", "cycle_time_ms",
           "tensor_fusion_threshold", "score"]


def search_six_settings(tmp_path, env=None):
    """120 steps on 2 ranks while autotune tries six settings of fusion
    threshold and cycle time, then the rest of its search, writing its log;
    every rank must exit 0 with every step exact. Returns each rank's
    RankResult and the log's rows."""
    log = tmp_path / "autotune.csv"
    steps = 120
    results = ranks.run_program(2, "autotune:steps_of_four_gradients", kwargs={"steps": steps}, env={
        "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": str(log), "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
        "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6", **(env or {})},
        timeout=240)
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    assert [r.last_json() for r in results] == [steps, steps]
    with open(log) as f:
        return results, list(csv.reader(f))


def test_autotune_logs_each_sample_and_keeps_every_rank_exact(tmp_path):
    _, rows = search_six_settings(tmp_path)
    assert rows[0] == COLUMNS
    samples = [dict(zip(COLUMNS, map(float, row))) for row in rows[1:]]
    # 6 settings of fusion threshold and cycle time, the cache the other way,
    # two smaller pipeline chunks (rows like their base's: Horovod's columns
    # have none for it), then the best again.
    assert len(samples) == 10, samples
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
    best = samples[9]
    assert best["score"] == max(s["score"] for s in samples[:9])


def test_every_rank_holds_bursts_of_async_allreduces_for_the_cycle_time_autotune_tries(tmp_path):
    # The cycle time also bounds each rank's hold of a burst of asynchronous
    # allreduces (the rank program's four allreduce_async per step): the
    # coordinator stamps the one it tries on its responses, and every rank
    # takes each one in the log's order, logging it when it changes.
    results, rows = search_six_settings(tmp_path, env={"HOROVOD_LOG_LEVEL": "info"})
    tried = [float(row[COLUMNS.index("cycle_time_ms")]) for row in rows[1:]]
    changes = [ms for i, ms in enumerate(tried) if i == 0 or abs(ms - tried[i - 1]) > 1e-3]
    assert len(changes) >= 2, tried  # the search moved the cycle time at least once
    for r in results:
        held = [float(ms) for ms in re.findall(r"holds a burst of asynchronous allreduces for at most ([0-9.]+) ms",
                                                r.stderr)]
        assert held == pytest.approx(changes, abs=2e-3), (held, tried, r.stderr)


def test_autotune_tries_smaller_pipeline_chunks_last_and_every_rank_stays_exact():
    # Gradients of 0.4-1.6 MB, fused: the shared-memory pipelined allreduce
    # cuts them into chunks, of 256 KiB by default (the members spin), and
    # every member must cut them alike while autotune tries 128 and 64 KiB.
    steps = 80
    results = ranks.run_program(2, "autotune:steps_of_four_gradients", kwargs={"steps": steps, "elements": 100000},
                                env={"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
                                     "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2",
                                     "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "2", "HOROVOD_LOG_LEVEL": "info"},
                                timeout=240)
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    assert [r.last_json() for r in results] == [steps, steps]
    log = results[0].stderr
    assert "then smaller pipeline chunks" in log, log
    tried = [int(n) for n in re.findall(r"trying a pipeline chunk of (\d+) bytes", log)]
    assert len(tried) == 2 and tried[0] == 2 * tried[1] >= 64 * 1024, log  # a half, then a quarter of a slot
    assert "autotune: done" in log and "pipeline chunk " in log[log.find("autotune: done"):], log


def test_bad_autotune_setting_is_a_clear_error():
    results = ranks.run_program(1, "autotune:steps_of_four_gradients", kwargs={"steps": 1},
                                env={"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "0"}, timeout=60)
    assert results[0].returncode != 0
    assert "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE must be at least 1" in results[0].stderr


@pytest.mark.parametrize("autotune", ["0", "1"])
def test_gradient_bucket_answer_is_the_configured_size_until_the_tuner_says_otherwise(autotune):
    # horovod.common.autotune, as a binding's optimizer uses it after a step:
    # without autotune no rank asks again (nor runs a collective); with it the
    # first answer, long before the bucket phase, is the configured size on
    # every rank, and they keep asking.
    for report in ranks.run_program_ok(2, "autotune:gradient_bucket_answers", env={"HOROVOD_AUTOTUNE": autotune},
                                       timeout=60):
        assert report["bucket"] == 4 << 20, report
        assert report["asks_again"] is (autotune == "1"), report
        assert report["error"] == ["ValueError", "configured_bytes and total_bytes must not be negative"], report
