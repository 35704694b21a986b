# test_fastcall.py - horovod.torch's repeated small allreduces through
# hvd-core's C accelerator (its table of argument blocks, which takes plain
# CPU tensors): every argument tells calls apart, tensors it must not take
# go the Python way with the same results, and a mismatch found from the
# table raises torch's error class, and Ctrl-C ends a wait there; repeated
# in-place allreduce_async_ calls are enqueued from the same table. Rank
# side: rank_programs/fastcall.py.
import pytest

import torch_ranks


def test_the_table_takes_plain_tensors_and_tells_every_argument_apart():
    # Each case runs three times in a row; for a plain tensor the first
    # call leaves its block in the table and the other two find it there.
    # A wrong match would give another case's result.
    for outcomes in torch_ranks.run_program_ok(2, "fastcall:table_takes_plain_tensors", timeout=180):
        for label, right, _ in outcomes:
            assert right, (label, outcomes)
        hits = {label: count for label, _, count in outcomes}
        expected = {label: 2 for label in hits}
        # An equal name in another string object finds the "sum" block at once.
        # A tensor that requires gradients goes through autograd, but its
        # gradient's allreduce (unnamed, a plain tensor) is "no name"'s block.
        expected.update({"equal name, another string": 3, "requires grad": 3, "requires grad, no_grad mode": 0,
                         "parameter": 0, "not contiguous, refused": 0, "no elements": 0, "200 names": 200,
                         "new result, input untouched": 0})
        assert hits == expected


def test_async_in_place_allreduces_are_enqueued_from_the_table():
    # Each case repeats its calls; every call after the first of its kind
    # is enqueued from the table (a model's 200 gradients included), and
    # what the Python path checks still holds.
    for outcomes in torch_ranks.run_program_ok(2, "fastcall:async_in_place_from_the_table", timeout=180):
        for label, right, _ in outcomes:
            assert right, (label, outcomes)
        hits = {label: count for label, _, count in outcomes}
        # Three rounds of 200: the second and third from the table. One
        # name under five signatures, three calls each: the first of each
        # makes its block ("sum again" finds "sum"'s). Unnamed tensors of one
        # shape share a block, several in flight at once. The optimizer's
        # four gradients come from the table in its second and third steps.
        assert hits == {"200 names": 400, "sum": 2, "average by default": 2, "prescale": 2, "postscale": 2,
                        "sum again": 3, "unnamed, five in flight": 14, "same name in flight, refused": 2,
                        "not contiguous, refused": 0, "optimizer, per-tensor": 8, "after shutdown": 0}, outcomes


def test_a_mismatch_met_from_the_table_raises_torchs_error_on_every_rank():
    for rank, report in enumerate(torch_ranks.run_program_ok(2, "fastcall:mismatch_after_table_hits", timeout=120)):
        assert report["hits before"] == 2, report
        # Rank 0's failing call came from the table; rank 1's shape is new.
        assert report["hits"] == report["hits before"] + (1 - rank), report
        assert report["raised"] is not None, report
        error_class, message = report["raised"]
        assert error_class == "horovod.torch.mpi_ops.HorovodCollectiveMismatchError", report
        assert "allreduce.t" in message and "shape" in message, report
        assert report["after"] == [2.0, 2.0], report


@pytest.mark.parametrize("in_place", [False, True], ids=["allreduce", "allreduce_"])
def test_ctrl_c_interrupts_an_allreduce_from_the_table_and_its_tensors_are_kept_alive(tmp_path, in_place):
    results = torch_ranks.run_program_ok(2, "fastcall:interrupted_in_a_repeated_allreduce",
                                         kwargs={"marker_dir": str(tmp_path), "in_place": in_place}, timeout=120)
    start = [0.0, 1.0, 2.0, 3.0]  # x on rank 0; rank 1's is one more
    # In place, the warm-up call left [1, 3, 5, 7] in x on both ranks.
    reduced = [2.0, 6.0, 10.0, 14.0] if in_place else [1.0, 3.0, 5.0, 7.0]
    zero, one = results
    assert zero["interrupted"] is True and "reduced" not in zero, zero
    assert zero["waited"] < 1.0, zero
    assert zero["from the table"] == 1 and one["from the table"] == 1, results
    # The operation in flight keeps the input and, out of place, the result
    # tensor the caller never got.
    assert zero["kept"] == [[[4], None if in_place else [4]]], zero
    if not in_place:
        assert one["reduced"] == reduced, one
    for rank, res in enumerate(results):
        assert res["x"] == (reduced if in_place else [value + rank for value in start]), (rank, res)
        assert res["after"] == [2.0], res
