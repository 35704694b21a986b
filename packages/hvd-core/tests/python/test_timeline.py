# test_timeline.py - HOROVOD_TIMELINE writes Chrome-trace JSON that is valid
# while the job runs, with Horovod's phase names. What the ranks run is in
# rank_programs/timeline.py.
import json

import ranks


def _load(path):
    with open(path) as f:
        return json.load(f)


def test_timeline_from_environment_is_valid_json_while_running(tmp_path):
    path = tmp_path / "timeline.json"
    results = ranks.run_program_ok(2, "timeline:five_steps_reading_the_timeline_each_step",
                                   env={"HOROVOD_TIMELINE": str(path), "HOROVOD_TIMELINE_MARK_CYCLES": "1"})
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


def test_timeline_started_and_stopped_at_run_time_holds_only_what_ran_between(tmp_path):
    path = tmp_path / "runtime.json"
    ranks.run_program_ok(2, "timeline:start_and_stop_the_timeline_at_run_time", kwargs={"path": str(path)})
    events = _load(path)
    tensors = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "allreduce.during" in tensors
    assert "allreduce.before" not in tensors and "allreduce.after" not in tensors
    assert "CYCLE_START" not in {e.get("name") for e in events}
