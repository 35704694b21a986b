# test_errors.py - horovod.mxnet's failures: arguments that differ between
# ranks are an MXNetError on every rank naming the tensor (never a hang or a
# crash), after which the engine goes on working; a peer that dies fails the
# survivors' pending collectives; bad input raises ValueError at the call,
# op=Adasum NotImplementedError (and AssertionError, as in Horovod).
import functools

import mxnet as mx
import pytest

import mxnet_ranks

# case -> the tensor name the error must carry (rank_programs/errors.py's MISMATCH_CASES)
MISMATCH_CASES = {
    "allreduce_shape": "allreduce.t",
    "allreduce_dtype": "allreduce.t",
    "allreduce_op": "allreduce.t",
    "allreduce_inplace_shape": "allreduce.t",
    "grouped_allreduce_shape": "grouped_allreduce.t_1",
    "broadcast_root": "broadcast.t",
    "allgather_tail": "allgather.t",
    "reducescatter_shape": "reducescatter.t",
    "allgather_of_failed_output": "allreduce.chain",
}


@functools.lru_cache(maxsize=None)
def _mismatch_reports(size):
    return mxnet_ranks.run_program_ok(size, "errors:every_mismatch_raises_mxnet_error", timeout=120)


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", sorted(MISMATCH_CASES))
def test_mismatch_raises_mxnet_error_on_every_rank(case, size):
    for rank, report in enumerate(_mismatch_reports(size)):
        raised = report[case]
        assert isinstance(raised, dict), "rank %d: %s" % (rank, raised)
        assert MISMATCH_CASES[case] in raised["message"], raised["message"]
        assert "HorovodCollectiveMismatchError" in raised["message"], raised["message"]
        assert report["after"] == [float(size)] * 2  # the engine is still usable
        assert report["pending"] == 0  # no operation left behind in the bridge


def test_dead_peer_fails_pending_collective_on_survivors():
    results = mxnet_ranks.run_program(3, "errors:dead_peer_fails_the_survivors", timeout=90,
                                      env={"HOROVOD_PEER_TIMEOUT_SECONDS": "5"})
    assert results[2].returncode == 17
    for res in results[:2]:
        assert res.returncode == 0, str(res)
        report = res.last_json()
        assert report["raised"] and "HorovodInternalError" in report["raised"], report
        assert report["seconds"] < 60, report


def test_bad_input_raises_value_error_at_the_call():
    import horovod.mxnet as hvd
    with pytest.raises(ValueError, match="storage type csr"):
        hvd.allreduce(mx.nd.array([[1, 0], [0, 2]]).tostype("csr"))
    with pytest.raises(ValueError, match="NDArray"):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="integer"):
        hvd.alltoall(mx.nd.zeros((2,)), splits=mx.nd.ones((1,), dtype="float32"))
    for call in (hvd.allreduce, hvd.allreduce_, hvd.reducescatter):
        with pytest.raises(NotImplementedError, match="Adasum"):
            call(mx.nd.zeros((2,)), op=hvd.Adasum)
    with pytest.raises(AssertionError):  # what Horovod's binding raises (assert op != Adasum)
        hvd.grouped_allreduce([mx.nd.zeros((2,))], op=hvd.Adasum)
