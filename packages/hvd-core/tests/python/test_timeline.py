# test_timeline.py - HOROVOD_TIMELINE writes Chrome-trace JSON that is valid
# while the job runs, with Horovod's phase names.
import json
import os

import ranks


def _load(path):
    with open(path) as f:
        return json.load(f)


def test_timeline_from_environment_is_valid_json_while_running(tmp_path):
    path = tmp_path / "timeline.json"
    results = ranks.run_ok(2, '''
hvd.init()
snapshots = []
for step in range(5):
    hvd.allreduce(np.ones(100, np.float32), name="grad.%d" % (step % 2))
    hvd.allgather(np.ones((hvd.rank() + 1, 2), np.float32), name="gathered")
    hvd.broadcast(np.ones(3, np.float32), 0, name="b")
    if hvd.rank() == 0:
        time.sleep(0.15)
        with open(os.environ["HOROVOD_TIMELINE"]) as f:
            json.load(f)  # must parse mid-run
        snapshots.append(True)
print(json.dumps(snapshots))
hvd.shutdown()
''', env={"HOROVOD_TIMELINE": str(path), "HOROVOD_TIMELINE_MARK_CYCLES": "1"})
    assert results[0] == [True] * 5
    events = _load(path)
    names = {e.get("name") for e in events}
    for expected in ["NEGOTIATE_ALLREDUCE", "ALLREDUCE", "NEGOTIATE_ALLGATHER", "ALLGATHER", "NEGOTIATE_BROADCAST",
                     "BROADCAST", "CYCLE_START", "process_name"]:
        assert expected in names, expected
    tensors = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"allreduce.grad.0", "allreduce.grad.1", "allgather.gathered", "broadcast.b"} <= tensors
    # Begin/end events balance per tensor row.
    depth = {}
    for e in events:
        if e.get("ph") == "B":
            depth[e["pid"]] = depth.get(e["pid"], 0) + 1
        elif e.get("ph") == "E":
            depth[e["pid"]] -= 1
            assert depth[e["pid"]] >= 0
    assert all(v == 0 for v in depth.values()), depth


def test_timeline_start_and_stop_at_run_time(tmp_path):
    path = tmp_path / "runtime.json"
    ranks.run_ok(2, '''
hvd.init()
hvd.allreduce(np.ones(4, np.float32), name="before")
hvd.start_timeline(sys.argv[1] if len(sys.argv) > 1 else os.environ["TL"], mark_cycles=False)
hvd.allreduce(np.ones(4, np.float32), name="during")
hvd.stop_timeline()
hvd.barrier()  # rank 1 must not submit "after" before rank 0 stopped the timeline
hvd.allreduce(np.ones(4, np.float32), name="after")
print(json.dumps(True))
''', env={"TL": str(path)})
    events = _load(path)
    tensors = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "allreduce.during" in tensors
    assert "allreduce.before" not in tensors and "allreduce.after" not in tensors
    assert "CYCLE_START" not in {e.get("name") for e in events}
