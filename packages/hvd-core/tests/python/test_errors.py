# test_errors.py - bad input and cross-rank mismatches give clear errors on
# every rank, never a hang, and the engine stays usable afterwards.
import json
import subprocess
import sys

import pytest

import ranks

MISMATCH_CASES = {
    "shape": "hvd.allreduce(np.zeros(3 + rank, np.float32), name='t')",
    "dtype": "hvd.allreduce(np.zeros(3, np.float32 if rank == 0 else np.int32), name='t')",
    "op": "hvd.allreduce(np.zeros(3, np.float32), op=hvd.Sum if rank == 0 else hvd.Max, name='t')",
    "root": "hvd.broadcast(np.zeros(3, np.float32), root_rank=0 if rank == 0 else 1, name='t')",
    "prescale": "hvd.allreduce(np.zeros(3, np.float32), op=hvd.Sum, prescale_factor=1.0 + rank, name='t')",
    "allgather_tail": "hvd.allgather(np.zeros((2, 3 + rank), np.float32), name='t')",
}


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("case", sorted(MISMATCH_CASES))
def test_mismatch_raises_on_every_rank_naming_tensor_and_ranks(case, np_):
    results = ranks.run_ok(np_, '''
hvd.init()
rank = hvd.rank()
out = {}
try:
    %s
    out["raised"] = None
except hvd.HorovodCollectiveMismatchError as e:
    out["raised"] = str(e)
# The engine is still usable.
out["after"] = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="after").tolist()
print(json.dumps(out))
''' % MISMATCH_CASES[case], timeout=60)
    expected = {"root": "broadcast.t", "allgather_tail": "allgather.t"}.get(case, "allreduce.t")
    for rank, res in enumerate(results):
        assert res["raised"], "rank %d did not raise" % rank
        assert "'%s'" % expected in res["raised"], res["raised"]
        # Both sides of the disagreement are named.
        assert "rank 0 requested" in res["raised"], res["raised"]
        assert "rank 1 requested" in res["raised"] or "ranks 1, 2 requested" in res["raised"], res["raised"]
        assert res["after"] == [float(np_)] * 2


def test_mismatched_collective_names_both_tensors_never_hangs():
    # Different names on different ranks is a stall, not a mismatch: the stall
    # shutdown turns it into an error on every rank.
    results = ranks.run(2, '''
hvd.init()
try:
    hvd.allreduce(np.zeros(1, np.float32), name="only_on_%d" % hvd.rank())
    print("no error")
except hvd.HorovodInternalError as e:
    print("internal:", e)
''', env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "2"}, timeout=30)
    for res in results:
        assert "internal:" in res.stdout and "Stall shutdown" in res.stdout, str(res)


def test_ranks_blocked_in_different_collectives_fail_on_every_rank_naming_both():
    # Rank 0 removes a process set while rank 1 waits in a barrier (as when
    # one rank raised and moved on): each waits for something the other will
    # never submit. Both get an error naming both operations, within the peer
    # timeout; hvd.init() brings them together again.
    results = ranks.run_ok(2, '''
hvd.init(process_sets="dynamic")
ps = hvd.add_process_set([1])
start = time.monotonic()
try:
    if hvd.rank() == 0:
        hvd.remove_process_set(ps)
    else:
        hvd.barrier()
    out = {"raised": None}
except hvd.HorovodInternalError as e:
    out = {"raised": str(e), "after_s": time.monotonic() - start}
try:
    hvd.allreduce(np.ones(1, np.float32), name="still_broken")
    out["still_broken"] = False
except hvd.HorovodInternalError:
    out["still_broken"] = True
hvd.init()  # the failed engine is replaced, on every rank together
out["later"] = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="later").tolist()
print(json.dumps(out))
''', timeout=60)
    for res in results:
        assert res["raised"] is not None, res
        assert "diverged" in res["raised"]
        assert "rank 0 waits on allgather 'process_set.remove." in res["raised"], res["raised"]
        assert "rank 1 waits on barrier 'barrier.noname.0'" in res["raised"], res["raised"]
        assert 4.5 < res["after_s"] < 9, res  # HOROVOD_PEER_TIMEOUT_SECONDS (5) after both blocked
        assert res["still_broken"] is True
        assert res["later"] == [2.0]


def test_divergence_is_declared_only_once_every_rank_is_blocked():
    # Ranks 0 and 1 wait on different tensors while rank 2 computes for 8 s:
    # it could still submit either, so nothing fails until it blocks too.
    results = ranks.run_ok(3, '''
hvd.init()
rank = hvd.rank()
if rank == 2:
    time.sleep(8)
start = time.monotonic()
try:
    hvd.allreduce(np.ones(1, np.float32), name="only_%d" % rank)
    out = {"raised": None}
except hvd.HorovodInternalError as e:
    out = {"raised": str(e), "after_s": time.monotonic() - start}
print(json.dumps(out))
''', env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=60)
    for rank, res in enumerate(results):
        assert "rank 2 waits on allreduce 'allreduce.only_2'" in res["raised"], res
    # Ranks 0 and 1 waited through rank 2's 8 s of work.
    assert results[0]["after_s"] > 8 and results[1]["after_s"] > 8, results


def test_init_replaces_an_engine_that_a_departed_rank_left_unusable():
    # Rank 1 restarts (shutdown, init) while ranks 0 and 2 still hold the old
    # engine: their next collective fails, and their init() joins rank 1's new one.
    results = ranks.run_ok(3, '''
hvd.init()
hvd.allreduce(np.ones(1, np.float32), name="first")
out = {}
if hvd.rank() == 1:
    hvd.shutdown()
else:
    time.sleep(1)
    try:
        hvd.allreduce(np.ones(1, np.float32), name="into_the_void")
        out["void"] = None
    except hvd.HorovodInternalError as e:
        out["void"] = str(e)
hvd.init()
out["again"] = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="again").tolist()
print(json.dumps(out))
''', timeout=90)
    assert "rank 1 has shut down" in results[0]["void"] and "rank 1 has shut down" in results[2]["void"], results
    assert all(res["again"] == [3.0] for res in results), results


def test_bad_input_errors_single_process():
    out = subprocess.run([sys.executable, "-c", '''
import numpy as np, horovod.common as hvd
errors = []
try:
    hvd.rank()
except ValueError as e:
    errors.append(str(e))
try:
    hvd.allreduce(np.zeros(3, np.float32))
except ValueError as e:
    errors.append(str(e))
hvd.init()
for f in [lambda: hvd.allreduce(np.zeros(3, np.complex64)),
          lambda: hvd.allreduce(np.zeros((4, 4), np.float32)[:, 1]),
          lambda: hvd.broadcast(np.zeros(3, np.float32), root_rank=5),
          lambda: hvd.broadcast(np.zeros(3, np.float32), root_rank=-1),
          lambda: hvd.alltoall(np.zeros(4, np.float32), splits=[3]),
          lambda: hvd.allgather(np.array(3.0, np.float32)),
          lambda: hvd.allreduce([1, 2, 3]),
          lambda: hvd.allreduce(np.zeros(3, np.float32), op=hvd.Sum, average=True),
          lambda: hvd.allreduce(np.zeros(3, bool), op=hvd.Average),
          lambda: hvd.reducescatter(np.zeros(4, np.float32), op=hvd.Adasum)]:
    try:
        f()
        errors.append("no error")
    except (ValueError, TypeError) as e:
        errors.append(type(e).__name__ + ": " + str(e) + (" (RuntimeError)" if isinstance(e, RuntimeError) else ""))
for e in errors:
    print(e)
'''], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "Horovod has not been initialized; use hvd.init()."
    assert lines[1] == "Horovod has not been initialized; use hvd.init()."
    assert "complex64 is not supported" in lines[2]
    assert "contiguous" in lines[3]
    assert "root_rank 5 is out of range" in lines[4]
    assert "root_rank -1 is out of range" in lines[5]
    assert "splits add up to 3 but the first dimension is 4" in lines[6]
    assert "scalar" in lines[7]
    assert "numpy.ndarray" in lines[8]
    assert "supersedes average" in lines[9]
    assert "bool" in lines[10] and "averaged" in lines[10]
    # Horovod raises a RuntimeError for an unsupported operation; hvd's class is also a TypeError.
    assert lines[11].startswith("HorovodUnsupportedError: reducescatter does not support op=Adasum")
    assert lines[11].endswith("(RuntimeError)")


def test_duplicate_in_flight_name_raises_value_error():
    # Rank 1 submits late, so rank 0's first "dup" is certainly still in flight.
    results = ranks.run_ok(2, '''
hvd.init()
out = {}
if hvd.rank() == 1:
    time.sleep(1.0)
h = hvd.allreduce_async(np.ones(4, np.float32), name="dup", op=hvd.Sum)
if hvd.rank() == 0:
    try:
        hvd.allreduce_async(np.ones(4, np.float32), name="dup")
        out["second"] = None
    except ValueError as e:
        out["second"] = str(e)
out["first"] = hvd.synchronize(h).tolist()
# Once synchronized, the name is free again.
out["reuse"] = hvd.allreduce(np.ones(4, np.float32), name="dup", op=hvd.Sum).tolist()
# Finished in the engine but not yet synchronized is still in flight: the
# rule does not depend on how fast the engine was (deterministic).
h = hvd.broadcast_async(np.ones(2, np.float32), root_rank=0, name="done")
while not hvd.poll(h):
    time.sleep(0.01)
try:
    hvd.broadcast_async(np.ones(2, np.float32), root_rank=0, name="done")
    out["after_poll"] = None
except ValueError as e:
    out["after_poll"] = str(e)
hvd.synchronize(h)
print(json.dumps(out))
''')
    assert "same name" in results[0]["second"] and "'allreduce.dup'" in results[0]["second"]
    for res in results:
        assert res["first"] == [2.0] * 4 and res["reuse"] == [2.0] * 4
        assert "'broadcast.done'" in res["after_poll"] and "not been synchronized" in res["after_poll"], res


def test_single_process_without_any_environment():
    out = subprocess.run([sys.executable, "-c", '''
import numpy as np, horovod.common as hvd
hvd.init()
print(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
      hvd.is_homogeneous(), hvd.allreduce(np.ones(2, np.float32)).tolist())
'''], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in __import__("os").environ.items() if not k.startswith("HOROVOD_")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "0", "1", "0", "1", "True", "[1.0,", "1.0]"]


def test_missing_rendezvous_or_secret_is_a_clear_error():
    env = dict(__import__("os").environ, HOROVOD_RANK="0", HOROVOD_SIZE="2")
    out = subprocess.run([sys.executable, "-c", "import horovod.common as hvd; hvd.init()"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0 and "HOROVOD_GLOO_RENDEZVOUS_ADDR" in out.stderr
    env.update(HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1", HOROVOD_GLOO_RENDEZVOUS_PORT="1")
    out = subprocess.run([sys.executable, "-c", "import horovod.common as hvd; hvd.init()"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0 and "HOROVOD_SECRET_KEY" in out.stderr


def test_stall_warning_names_the_tensor_and_the_missing_rank():
    results = ranks.run(3, '''
hvd.init()
if hvd.rank() == 1:
    time.sleep(3.5)  # submits late: a stall, not a failure
out = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="late_grad")
print(json.dumps(out.tolist()))
''', env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}, timeout=60)
    for res in results:
        assert res.returncode == 0, str(res)
        assert res.stdout.strip().splitlines()[-1] == "[3.0, 3.0]"
    # The coordinator (rank 0) warns, naming the tensor and who is missing.
    warning = results[0].stderr
    assert "Stall detected" in warning, warning
    assert "'allreduce.late_grad'" in warning and "missing rank(s) 1" in warning, warning


def test_init_comm_must_cover_the_whole_job():
    # Horovod's init(comm=) takes an mpi4py communicator or a list of ranks;
    # hvd runs on the whole job, so only those covering it are accepted.
    results = ranks.run(2, '''
class Comm:  # what mpi4py's Intracomm offers that init() looks at
    def __init__(self, size, rank):
        self.size, self.rank = size, rank
    def Get_size(self):
        return self.size
    def Get_rank(self):
        return self.rank
rank = int(os.environ["HOROVOD_RANK"])
out = {}
hvd.init(comm=Comm(2, rank))
out["world_comm"] = hvd.size() == 2
hvd.shutdown()
hvd.init(comm=[0, 1])
out["rank_list"] = hvd.size() == 2
hvd.shutdown()
for bad in (Comm(1, 0), [0]):
    try:
        hvd.init(comm=bad)
        out[str(bad)] = "accepted"
    except ValueError as e:
        out[str(bad)] = "process_sets=" in str(e) and not hvd.is_initialized()
try:
    hvd.init(comm=object())
    out["object"] = "accepted"
except ValueError as e:
    out["object"] = "mpi4py communicator or a list of ranks" in str(e)
print(json.dumps(out))
''')
    for res in results:
        assert res.returncode == 0, res
        assert all(v is True for v in json.loads(res.stdout.splitlines()[-1]).values()), res.stdout
