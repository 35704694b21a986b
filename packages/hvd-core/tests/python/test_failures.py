# test_failures.py - a peer that dies or freezes turns every pending and later
# collective on every survivor into HorovodInternalError within the bound;
# shutdown() then init() works again in the same process.
import pytest

import ranks

DEATH = '''
import signal
hvd.init()
rank = hvd.rank()
x = np.ones(1000, np.float32)
for i in range(20):
    hvd.allreduce(x, name="warm.%d" % i)
if rank == {victim}:
    {action}
t0 = time.time()
try:
    while time.time() - t0 < 30:
        hvd.allreduce(x, name="loop")
    print(json.dumps({{"error": None}}))
except hvd.HorovodInternalError as e:
    elapsed = time.time() - t0
    # Every later collective fails the same way, at once.
    try:
        hvd.allreduce(x, name="later")
        later = None
    except hvd.HorovodInternalError as e2:
        later = str(e2)
    print(json.dumps({{"error": str(e), "elapsed": elapsed, "later": later}}))
'''


@pytest.mark.parametrize("np_", [2, 3, 4])
@pytest.mark.parametrize("victim", [0, 1])
def test_killed_peer_fails_survivors_within_five_seconds(np_, victim):
    results = ranks.run(np_, DEATH.format(victim=victim, action="os.kill(os.getpid(), signal.SIGKILL)"), timeout=60)
    for res in results:
        if res.rank == victim:
            assert res.returncode == -9
            continue
        assert res.returncode == 0, str(res)
        out = __import__("json").loads(res.stdout.strip().splitlines()[-1])
        assert out["error"], str(res)
        assert out["elapsed"] < 5.5, out
        assert out["later"], out


def test_frozen_peer_is_detected_by_heartbeat():
    # SIGSTOP: no reset ever arrives; only the heartbeat timeout can tell.
    results = ranks.run(3, DEATH.format(victim=2, action="os.kill(os.getpid(), signal.SIGSTOP)"),
                        env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=40, kill_when_done=[2])
    for res in results[:2]:
        assert res.returncode == 0, str(res)
        out = __import__("json").loads(res.stdout.strip().splitlines()[-1])
        assert out["error"] and out["elapsed"] < 4.0, out
        assert "rank 2" in out["error"], out


def test_peer_death_while_idle_fails_the_next_collective():
    results = ranks.run(2, '''
import signal
hvd.init()
if hvd.rank() == 1:
    hvd.allreduce(np.ones(1, np.float32))
    os.kill(os.getpid(), signal.SIGKILL)
hvd.allreduce(np.ones(1, np.float32))
time.sleep(2)
t0 = time.time()
try:
    hvd.allreduce(np.ones(1, np.float32))
    print("no error")
except hvd.HorovodInternalError as e:
    print("error after %.2f s: %s" % (time.time() - t0, e))
''', timeout=30)
    assert "error after 0." in results[0].stdout, str(results[0])


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_shutdown_then_init_again_in_the_same_process(np_):
    results = ranks.run_ok(np_, '''
out = []
for round in range(3):
    hvd.init()
    out.append(hvd.allreduce(np.full(3, hvd.rank() + round, np.float32), op=hvd.Sum).tolist())
    hvd.shutdown()
    out.append(hvd.is_initialized())
try:
    hvd.allreduce(np.ones(1, np.float32))
    out.append("no error")
except ValueError as e:
    out.append(str(e))
print(json.dumps(out))
''')
    n = np_
    for res in results:
        assert res[0] == [float(sum(range(n)))] * 3
        assert res[2] == [float(sum(range(n)) + n)] * 3
        assert res[1] is False and res[5] is False
        assert res[6] == "Horovod has not been initialized; use hvd.init()."


def test_pending_operations_fail_when_a_rank_shuts_down():
    results = ranks.run(2, '''
hvd.init()
if hvd.rank() == 0:
    hvd.shutdown()
    print("shut down")
else:
    try:
        hvd.allreduce(np.ones(1, np.float32), name="never")
        print("no error")
    except hvd.HorovodInternalError as e:
        print("internal:", e)
''', timeout=30)
    assert results[0].returncode == 0 and "shut down" in results[0].stdout, str(results[0])
    assert "internal:" in results[1].stdout and "shut down" in results[1].stdout, str(results[1])


def test_hvd_abort_fails_every_rank_with_its_reason_and_init_starts_again():
    # The C ABI's hvd_abort (as NCCL's ncclCommAbort): rank 2 gives up while
    # ranks 0 and 1 wait in a collective it never joins.
    results = ranks.run_ok(3, '''
from horovod.common import c_api
lib = c_api.lib()
pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
hvd.allreduce(np.ones(1), name="warm")
t0 = time.time()
out = {}
if hvd.rank() == 2:
    time.sleep(0.5)
    c_api.check(lib.hvd_abort(b"input pipeline broke", 20))
    try:
        hvd.allreduce(np.ones(1), name="after")
    except hvd.HorovodInternalError as e:
        out["error"] = str(e)
else:
    try:
        hvd.allreduce(np.ones(1), name="never")
    except hvd.HorovodInternalError as e:
        out["error"] = str(e)
    try:  # a set without rank 2 ends too: the engine as a whole has failed
        hvd.allreduce(np.ones(1), name="pair", process_set=pair)
        out["pair"] = None
    except hvd.HorovodInternalError as e:
        out["pair"] = str(e)
out["seconds"] = time.time() - t0
try:
    c_api.check(lib.hvd_get_async_error())
    out["async"] = None
except hvd.HorovodInternalError as e:
    out["async"] = str(e)
hvd.init()
out["after"] = hvd.allreduce(np.ones(1), op=hvd.Sum, name="again").tolist()
hvd.barrier()
hvd.shutdown()
c_api.check(lib.hvd_abort(None, 0))  # no engine: nothing to do
print(json.dumps(out))
''', timeout=60)
    for res in results:
        assert "rank 2 aborted the job (hvd_abort): input pipeline broke" in res["error"], res
        assert res["seconds"] < 5 and res["async"] and "input pipeline broke" in res["async"], res
        assert res["after"] == [3.0], res
    for res in results[:2]:
        assert "input pipeline broke" in res["pair"], res
