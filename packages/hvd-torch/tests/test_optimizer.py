# test_optimizer.py - DistributedOptimizer on real ranks. Every check runs
# inside one job per world size (starting ranks costs more than the checks),
# comparing the optimizer's gradients with an independent reference: the
# local gradients of a copy of the model, averaged with hvd.allreduce. The
# rank side is rank_programs/optimizer.py.
import re

import pytest

import torch_ranks


@pytest.mark.parametrize("size", [1, 2, 3])
def test_distributed_optimizer_gradients_and_steps_match_allreduced_local_gradients(size):
    results = torch_ranks.run_program_ok(size, "optimizer:every_optimizer_check", timeout=180,
                                         env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1", "OMP_NUM_THREADS": "1"})
    expected = {"average", "param_groups", "skip_synchronize", "backward_passes_per_step", "groups",
                "explicit_groups", "predivide_sum", "compression", "unused_parameter", "sparse", "buckets",
                "bucket_bookkeeping", "bucket_block", "validation", "adasum", "adam_identical", "channels_last"}
    if size > 1:
        expected.update({"zero_grad_assertion", "last_allreduce_without_waiter"})
    if size == 3:
        expected.add("process_set")
    for done in results:
        assert set(done) == expected


def test_compressors_round_trip_floats_and_leave_integers_and_16_bit_tensors_alone():
    # In-process: compressors are pure tensor transforms.
    import torch

    from horovod.torch.compression import Compression

    x = torch.randn(5, dtype=torch.float32)
    for comp, wire, tol in ((Compression.none, torch.float32, 0), (Compression.fp16, torch.float16, 1e-3),
                            (Compression.bf16, torch.bfloat16, 1e-2)):
        c, ctx = comp.compress(x)
        assert c.dtype == wire
        back = comp.decompress(c, ctx)
        assert back.dtype == torch.float32 and torch.allclose(back, x, atol=tol, rtol=tol)
        ints = torch.arange(4)
        c, ctx = comp.compress(ints)  # integers travel unchanged
        assert c is ints and comp.decompress(c, ctx) is ints
    d = torch.randn(3, dtype=torch.float64)
    c, ctx = Compression.bf16.compress(d)
    assert c.dtype == torch.bfloat16 and Compression.bf16.decompress(c, ctx).dtype == torch.float64
    h = torch.randn(3).half()
    c, ctx = Compression.fp16.compress(h)
    assert c is h  # already 16-bit: no copy


_AUTOTUNE_QUICKLY = {"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
                     "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "2",
                     "HOROVOD_LOG_LEVEL": "info", "OMP_NUM_THREADS": "1"}


def test_autotune_tries_gradient_bucket_sizes_with_every_rank_bucketing_alike():
    # The default 25 MiB buckets over 28 layers (7 MiB of gradients: one
    # bucket): after its other knobs the tuner tries a quarter (two buckets)
    # and a sixteenth (five); four times would cut them as 25 MiB does. Both
    # ranks must change buckets after the same step, and the training must
    # equal per-tensor reduction bit for bit.
    quarter, sixteenth = 25 * (1 << 20) // 4, 25 * (1 << 20) // 16
    results = torch_ranks.run_program(2, "optimizer:autotuned_buckets", kwargs={"steps": 150, "layers": 28},
                                      timeout=240, env=_AUTOTUNE_QUICKLY)
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    first, second = [r.last_json() for r in results]
    assert first["buckets"] == second["buckets"]
    steps = first["buckets"]  # [bucket bytes, grouped allreduces] of each step's backward
    tried = [b for i, b in enumerate(steps) if i == 0 or b != steps[i - 1]]
    assert tried[:3] == [[25 << 20, 1], [quarter, 2], [sixteenth, 5]], tried
    assert tried[-1] in tried[:3], tried
    assert not first["still_asking"] and not second["still_asking"]  # the tuner finished within the steps
    assert first["tuned"] == second["tuned"] == first["per_tensor"] == second["per_tensor"]
    log = results[0].stderr
    assert re.findall(r"trying a gradient bucket of (\d+) bytes", log) == [str(quarter), str(sixteenth)], log
    done = log[log.find("autotune: done"):]
    assert "gradient bucket " in done, log


def test_autotune_keeps_a_gradient_bucket_size_the_user_set():
    # HOROVOD_GRADIENT_BUCKET_MB=4 over 1.5 MiB: the tuner would try 1 MiB
    # and 256 KiB if the size were its to choose; set by the user, every
    # step keeps 4 MiB, as an explicitly set engine knob is kept.
    results = torch_ranks.run_program(2, "optimizer:autotuned_buckets", kwargs={
        "steps": 60, "layers": 6, "bucket_mb": "4"}, timeout=240, env=_AUTOTUNE_QUICKLY)
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    for r in results:
        out = r.last_json()
        assert not out["tuning"]
        assert out["buckets"] == [[4 << 20, 1]] * 60
        assert out["tuned"] == out["per_tensor"]
    assert "autotune: done" in results[0].stderr, results[0].stderr  # the other knobs were tuned
    assert "trying a gradient bucket" not in results[0].stderr


@pytest.mark.parametrize("early", [0, 1])
def test_autotuned_buckets_let_a_rank_join_early(early):
    # While the tuner runs, the ranks still training agree on the bucket size
    # through an allreduce, in which a joined rank stands in with zeros (a
    # broadcast would fail: only allreduce supports join). Without rank 0
    # nobody can answer: the others stop asking and keep their size.
    results = torch_ranks.run_program_ok(2, "optimizer:autotuned_buckets_with_join", kwargs={"early": early,
                                         "steps": 40}, timeout=120, env={
        "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "5",
        "OMP_NUM_THREADS": "1"})
    assert [r["steps"] for r in results] == [5 if r == early else 40 for r in range(2)]
    assert results[1 - early]["still_asking"] is (early == 1), results  # rank 0 alone still hears the tuner
