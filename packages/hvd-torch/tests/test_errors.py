# test_errors.py - horovod.torch's errors: cross-rank mismatches raise on every
# rank (HorovodInternalError, as Horovod's torch binding raises, which is
# also hvd-core's HorovodCollectiveMismatchError) and never hang; bad input,
# duplicate names and use before init raise ValueError with Horovod's wording;
# a dead peer fails the survivors.
import functools

import pytest

import torch_ranks

MISMATCH_CASES = {
    "shape": ("allreduce.t", "hvd.allreduce(torch.zeros(3 + rank), name='t')"),
    "dtype": ("allreduce.t", "hvd.allreduce(torch.zeros(3, dtype=torch.float32 if rank == 0 else torch.int32), "
                             "name='t')"),
    "op": ("allreduce.t", "hvd.allreduce(torch.zeros(3), op=hvd.Sum if rank == 0 else hvd.Max, name='t')"),
    "root": ("broadcast.t", "hvd.broadcast(torch.zeros(3), root_rank=0 if rank == 0 else 1, name='t')"),
    "allgather_tail": ("allgather.t", "hvd.allgather(torch.zeros(2, 3 + rank), name='t')"),
    "async_shape": ("allreduce.t", "hvd.synchronize(hvd.allreduce_async(torch.zeros(3 + rank), name='t'))"),
    "inplace_dtype": ("allreduce.t", "hvd.allreduce_(torch.zeros(3, dtype=torch.float64 if rank else "
                                     "torch.float32), name='t')"),
    "reducescatter_shape": ("reducescatter.t", "hvd.reducescatter(torch.zeros(6, 1 + rank), name='t')"),
    "grad_shape": ("allreduce", "hvd.allreduce(torch.zeros(3 + rank, requires_grad=True), name='t')"
                                ".sum().backward()"),
}

MISMATCH_SCRIPT = r'''
import traceback
hvd.init()
rank = hvd.rank()
from horovod.common.exceptions import HorovodCollectiveMismatchError
report = {}
for case, code in CASES.items():
    try:
        exec(code)
        report[case] = "no error"
    except hvd.HorovodInternalError as e:
        report[case] = {"message": str(e), "core_class": isinstance(e, HorovodCollectiveMismatchError),
                        "runtime_error": isinstance(e, RuntimeError)}
    except Exception:
        report[case] = traceback.format_exc()
    # The engine is still usable after every mismatch.
    after = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after." + case)
    if not torch.equal(after, torch.full((2,), float(hvd.size()))):
        report[case] = "engine unusable after the mismatch: %s" % after
print(json.dumps(report))
'''


@functools.lru_cache(maxsize=None)
def _mismatch_reports(size):
    cases = {case: code for case, (_, code) in MISMATCH_CASES.items()}
    return torch_ranks.run_ok(size, "CASES = %r\n" % cases + MISMATCH_SCRIPT, timeout=120)


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", sorted(MISMATCH_CASES))
def test_mismatch_raises_horovod_internal_error_on_every_rank(case, size):
    tensor_name = MISMATCH_CASES[case][0]
    for rank, report in enumerate(_mismatch_reports(size)):
        raised = report[case]
        assert isinstance(raised, dict), "rank %d: %s" % (rank, raised)
        assert raised["core_class"] and raised["runtime_error"], raised
        assert tensor_name in raised["message"], raised["message"]
        assert "rank 0" in raised["message"], raised["message"]


def test_duplicate_in_flight_name_raises_value_error():
    # Rank 1 submits late, so rank 0's first "dup" is certainly still in flight
    # when rank 0 submits the second.
    reports = torch_ranks.run_ok(2, r'''
hvd.init()
report = {"second": None}
if hvd.rank() == 1:
    time.sleep(1.0)
first = hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
if hvd.rank() == 0:
    try:
        hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
    except ValueError as e:
        report["second"] = str(e)
report["first"] = hvd.synchronize(first).tolist()
# Once finished, the name is free again.
report["reuse"] = hvd.allreduce(torch.ones(3), name="dup", op=hvd.Sum).tolist()
print(json.dumps(report))
''', timeout=60)
    assert reports[0]["second"] and "'allreduce.dup'" in reports[0]["second"], reports[0]
    for report in reports:
        assert report["first"] == [2.0] * 3 and report["reuse"] == [2.0] * 3, report


BAD_INPUT_SCRIPT = r'''
report = {}

def record(case, fn, exc=ValueError):
    try:
        fn()
        report[case] = "no error"
    except exc as e:
        report[case] = ["ok", str(e)]
    except Exception as e:
        report[case] = "wrong class %s: %s" % (type(e).__name__, e)

record("rank_before_init", hvd.rank)
record("allreduce_before_init", lambda: hvd.allreduce(torch.ones(3)))
record("broadcast_before_init", lambda: hvd.broadcast(torch.ones(3), 0))
hvd.init()
record("non_contiguous", lambda: hvd.allreduce(torch.zeros(4, 4)[:, 1]))
record("non_contiguous_inplace", lambda: hvd.allreduce_(torch.zeros(4, 4).t()))
record("unsupported_dtype", lambda: hvd.allreduce(torch.zeros(3, dtype=torch.complex64)))
record("unsupported_dtype_allgather", lambda: hvd.allgather(torch.zeros(3, dtype=torch.complex64)))
record("not_a_tensor", lambda: hvd.allreduce_async([1.0, 2.0]))
record("root_out_of_range", lambda: hvd.broadcast(torch.zeros(3), root_rank=5))
record("bad_splits", lambda: hvd.alltoall(torch.zeros(4), splits=[3, 1, 1]))
record("unregistered_process_set", lambda: hvd.allreduce(torch.zeros(3), process_set=hvd.ProcessSet([0])))
record("unknown_handle", lambda: hvd.synchronize(12345))
record("op_and_average", lambda: hvd.allreduce(torch.zeros(3), average=True, op=hvd.Sum))
record("sparse_op", lambda: hvd.sparse_allreduce_async(torch.zeros(3).to_sparse(), "s", hvd.Max))
# After all that the engine works.
report["after"] = hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist()
print(json.dumps(report))
'''


def test_bad_input_and_use_before_init_raise_value_error_single_process():
    report = torch_ranks.run_ok(1, BAD_INPUT_SCRIPT, timeout=60)[0]
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
    results = torch_ranks.run(2, r'''
import signal
hvd.init()
hvd.allreduce(torch.ones(1), name="warmup")
if hvd.rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.time()
errors = []
for attempt in range(2):
    try:
        hvd.allreduce(torch.ones(1), name="after_death")
        errors.append(None)
    except hvd.HorovodInternalError as e:
        errors.append(str(e))
print(json.dumps({"errors": errors, "elapsed": time.time() - t0}))
''', env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=60)
    assert results[1].returncode == -9
    assert results[0].returncode == 0, str(results[0])
    report = results[0].last_json()
    assert all(report["errors"]), report
    assert report["elapsed"] < 10, report
