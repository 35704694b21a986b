# test_naive_engine.py - horovod.mxnet on MXNet's synchronous NaiveEngine
# (MXNET_ENGINE_TYPE=NaiveEngine, MXNet's debugging engine) at 2 ranks:
# every collective on every dtype, mismatches raising MXNetError at the
# call on every rank, and a DistributedTrainer of bfloat16 parameters equal
# to one process.
import mxnet_ranks

MISMATCH_CASES = ["allreduce_shape", "allreduce_dtype", "allreduce_op", "allreduce_inplace_shape",
                  "grouped_allreduce_shape", "broadcast_root", "allgather_tail", "reducescatter_shape",
                  "allgather_of_failed_output"]


def test_collectives_errors_and_training_on_naive_engine():
    reports = mxnet_ranks.run_program_ok(2, "naive:everything_works_on_naive_engine", timeout=150,
                                         env={"MXNET_ENGINE_TYPE": "NaiveEngine"})
    for rank, report in enumerate(reports):
        assert report["naive"], report
        assert "HorovodCollectiveMismatchError" in (report["raised_at_call"] or ""), report["raised_at_call"]
        assert report["collectives"]["failures"] == [], "rank %d: %s" % (rank, report["collectives"]["failures"])
        assert report["collectives"]["ran"] > 170
        for case in MISMATCH_CASES:
            raised = report["mismatches"][case]
            assert isinstance(raised, dict) and "HorovodCollectiveMismatchError" in raised["message"], (case, raised)
        assert report["mismatches"]["after"] == [2.0, 2.0]
        # bfloat16 parameters: within test_training.py's bfloat16 tolerance of one process.
        assert report["trainer"]["diff"] < 2e-2 and report["trainer"]["moved"] > 1e-3, report["trainer"]
        assert report["trainer"]["ranks_agree"] and report["trainer"]["grad_dtypes"] == ["bfloat16"]
