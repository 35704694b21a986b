# test_collectives.py - every collective of horovod.torch (plain, in-place,
# async, grouped), every dtype, autograd and process sets at 1, 2 and 3 real
# ranks, against references computed from all ranks' inputs.
#
# Starting torch in a rank costs seconds on two cores, so each world size
# runs ONE job (rank_programs/collectives.py) that performs every check and
# reports {check: failure or None}; the tests below read their checks from
# that report.
import functools

import pytest

import torch_ranks

SIZES = [1, 2, 3]


@functools.lru_cache(maxsize=None)
def _report(size):
    """Runs every check at `size` ranks once per session; one report per rank."""
    return torch_ranks.run_program_ok(size, "collectives:every_collective_check", timeout=180)


def test_every_check_also_passes_through_ctypes_alone():
    # The synchronous calls go through hvd-core's C accelerator where it is
    # built (the runs above); HVD_FASTCALL=0 takes the ctypes path, which
    # must give the same results.
    reports = torch_ranks.run_program_ok(2, "collectives:every_collective_check", timeout=180,
                                         env={"HVD_FASTCALL": "0"})
    for rank, report in enumerate(reports):
        assert len(report) > 10, report
        failed = {check: failure for check, failure in report.items() if failure is not None}
        assert not failed, "rank %d: %s" % (rank, failed)


def _assert_checks(size, *checks):
    for rank, report in enumerate(_report(size)):
        for check in checks:
            assert check in report, "rank %d never ran %s" % (rank, check)
            assert report[check] is None, report[check]


@pytest.mark.parametrize("size", SIZES)
def test_allreduce_every_dtype_and_op_matches_reference(size):
    _assert_checks(size, "allreduce_dtypes")


@pytest.mark.parametrize("size", SIZES)
def test_large_out_of_place_allreduce_results_from_the_engine_pool(size):
    _assert_checks(size, "allreduce_large")


@pytest.mark.parametrize("size", SIZES)
def test_allreduce_default_average_scale_factors_in_place_and_async(size):
    _assert_checks(size, "allreduce_variants", "allreduce_async")


@pytest.mark.parametrize("size", SIZES)
def test_grouped_allreduce_and_in_place_async_variants(size):
    _assert_checks(size, "grouped_allreduce")


@pytest.mark.parametrize("size", SIZES)
def test_in_place_groups_and_single_tensors_reuse_their_argument_block_only_for_matching_tensors(size):
    _assert_checks(size, "grouped_in_place_reuse")


@pytest.mark.parametrize("size", SIZES)
def test_sparse_allreduce_async_sums_and_averages_sparse_tensors(size):
    _assert_checks(size, "sparse_allreduce")


@pytest.mark.parametrize("size", SIZES)
def test_allgather_every_dtype_with_different_first_dimensions(size):
    _assert_checks(size, "allgather_dtypes", "grouped_allgather")


@pytest.mark.parametrize("size", SIZES)
def test_broadcast_every_dtype_from_every_root_in_place_and_async(size):
    _assert_checks(size, "broadcast_dtypes", "broadcast_variants")


@pytest.mark.parametrize("size", SIZES)
def test_alltoall_with_and_without_splits_returns_received_splits(size):
    _assert_checks(size, "alltoall")


@pytest.mark.parametrize("size", SIZES)
def test_reducescatter_uneven_rows_and_grouped(size):
    _assert_checks(size, "reducescatter", "grouped_reducescatter")


@pytest.mark.parametrize("size", SIZES)
def test_gradients_flow_through_every_collective_as_in_horovod(size):
    _assert_checks(size, "autograd_allreduce", "autograd_allgather", "autograd_broadcast", "autograd_alltoall",
                   "autograd_reducescatter")


@pytest.mark.parametrize("size", SIZES)
def test_process_set_collectives_involve_only_members(size):
    _assert_checks(size, "process_sets")


@pytest.mark.parametrize("size", SIZES)
def test_torch_and_numpy_bindings_share_one_engine(size):
    _assert_checks(size, "shared_state")


@pytest.mark.parametrize("size", SIZES)
def test_join_returns_last_joined_rank(size):
    _assert_checks(size, "join")


def _cuda_available():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("size", [1, 2])
def test_cuda_tensors_come_back_on_their_device_and_train(size):
    reports = torch_ranks.run_program_ok(size, "collectives:cuda_tensors_and_training", timeout=180)
    for rank, report in enumerate(reports):
        assert all(report.values()), "rank %d: %s" % (rank, report)


# test_cuda.py's rank programs run only where a GPU is; run them here on CPU
# tensors (the "device" result then comes from the CPU engine too, so the
# comparison is trivially equal) so that the programs keep working between
# the GPU sessions that run them for real.
def test_the_gpu_rank_programs_still_run_on_cpu_tensors():
    reports = torch_ranks.run_program_ok(2, "cuda:every_collective_matches_the_cpu_engine", timeout=180,
                                         kwargs={"device": "cpu"})
    failures = {k: v for report in reports for k, v in report.items() if v is not None}
    assert not failures, failures
    # Every check ran: 14 per integer dtype, 15 per float, 11 for bool, the one-rank set (on rank 1).
    assert len(reports[0]) == 5 * 14 + 4 * 15 + 11, sorted(reports[0])
    assert len(reports[1]) == 5 * 14 + 4 * 15 + 11 + 1, sorted(reports[1])
    for rank, report in enumerate(torch_ranks.run_program_ok(2, "cuda:training_matches_the_cpu", timeout=180,
                                                             kwargs={"device": "cpu"})):
        assert report and all(report.values()), "rank %d: %s" % (rank, report)
