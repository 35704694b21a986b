# test_errors.py - horovod.torch's errors: cross-rank mismatches raise on every
# rank (HorovodInternalError, as Horovod's torch binding raises, which is
# also hvd-core's HorovodCollectiveMismatchError) and never hang; bad input,
# duplicate names and use before init raise ValueError with Horovod's wording;
# a dead peer fails the survivors.
import functools

import pytest

import torch_ranks

# case -> the tensor name its error must carry; the cases themselves are
# rank_programs/errors.py's MISMATCH_CASES.
MISMATCH_CASES = {
    "shape": "allreduce.t",
    "dtype": "allreduce.t",
    "op": "allreduce.t",
    "root": "broadcast.t",
    "allgather_tail": "allgather.t",
    "async_shape": "allreduce.t",
    "inplace_dtype": "allreduce.t",
    "reducescatter_shape": "reducescatter.t",
    "grad_shape": "allreduce",
    "grouped_inplace_shape": "grouped_allreduce.t_1",
}


@functools.lru_cache(maxsize=None)
def _mismatch_reports(size):
    return torch_ranks.run_program_ok(size, "errors:every_mismatch_raises_internal_error", timeout=120)


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", sorted(MISMATCH_CASES))
def test_mismatch_raises_horovod_internal_error_on_every_rank(case, size):
    tensor_name = MISMATCH_CASES[case]
    for rank, report in enumerate(_mismatch_reports(size)):
        assert case in report, "rank %d never ran case %r; it ran %s" % (rank, case, sorted(report))
        raised = report[case]
        assert isinstance(raised, dict), "rank %d: %s" % (rank, raised)
        assert raised["core_class"] and raised["runtime_error"], raised
        assert tensor_name in raised["message"], raised["message"]
        assert "rank 0" in raised["message"], raised["message"]


def test_duplicate_in_flight_name_raises_value_error():
    # Rank 1 submits late, so rank 0's first "dup" is certainly still in flight
    # when rank 0 submits the second.
    reports = torch_ranks.run_program_ok(2, "errors:duplicate_in_flight_name", timeout=60)
    assert reports[0]["second"] and "'allreduce.dup'" in reports[0]["second"], reports[0]
    for report in reports:
        assert report["first"] == [2.0] * 3 and report["reuse"] == [2.0] * 3, report


def test_bad_input_and_use_before_init_raise_value_error_single_process():
    report = torch_ranks.run_program_ok(1, "errors:bad_input_and_use_before_init", timeout=60)[0]
    for case, outcome in report.items():
        if case == "after":
            assert outcome == [1.0, 1.0]
            continue
        assert isinstance(outcome, list), "%s: %s" % (case, outcome)
    for case in ("rank_before_init", "allreduce_before_init", "broadcast_before_init"):
        assert "Horovod has not been initialized; use hvd.init()." in report[case][1], report[case]
    assert report["non_contiguous"][1] == "Tensor is required to be contiguous."
    assert report["non_contiguous_inplace"][1] == "Tensor is required to be contiguous."
    assert "complex64" in report["unsupported_dtype"][1]
    assert "complex64" in report["unsupported_dtype_allgather"][1]
    assert "not registered" in report["unregistered_process_set"][1]


def test_dead_peer_fails_pending_and_later_collectives_on_survivors():
    results = torch_ranks.run_program(2, "errors:rank_1_dies_after_warmup", env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"},
                                      timeout=60)
    assert results[1].returncode == -9
    assert results[0].returncode == 0, str(results[0])
    report = results[0].last_json()
    assert all(report["errors"]), report
    assert report["elapsed"] < 10, report
