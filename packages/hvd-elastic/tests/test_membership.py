"""Hosts that discovery adds, removes, and brings back: the job resizes at the next commit,
newcomers receive the committed state, and no committed step is lost or repeated."""

import time

from elastic_harness import Job, assert_no_worker_left, assert_trained_consistently, local_hosts
from elastic_train import size_stretches as _sizes


def test_added_hosts_join_at_the_next_commit_and_receive_the_state(tmp_path):
    hosts = [h + ":1" for h in local_hosts(4)]
    job = Job(tmp_path, hosts=hosts[:2])
    job.run("-np", 2, "--min-np", 2, "--max-np", 4,
            train_args=["--steps", 12, "--until-sizes", "2,4", *job.hosts_at(4, hosts)])
    history = assert_trained_consistently(job, size=4, steps=12)
    assert _sizes(history) == [2, 4]
    newcomers = [e for e in job.events("start") if e["host"] in local_hosts(4)[2:]]
    assert len(newcomers) == 2
    # They started from the state the others had committed, not from scratch.
    assert all(e["step"] >= 4 for e in newcomers), newcomers
    # The hosts that were there first keep the lowest ranks.
    ranks = {e["host"]: e["rank"] for e in job.events("done")}
    assert [ranks[h] for h in local_hosts(4)[:2]] == [0, 1], ranks
    assert "blacklisted" not in job.result.stderr
    assert_no_worker_left(job)


def test_removed_hosts_leave_without_being_blacklisted(tmp_path):
    hosts = [h + ":1" for h in local_hosts(4)]
    job = Job(tmp_path, hosts=hosts)
    job.run("-np", 4, "--min-np", 2, train_args=["--steps", 14, "--until-sizes", "4,2", *job.hosts_at(4, hosts[:2])])
    history = assert_trained_consistently(job, size=2, steps=14)
    assert _sizes(history) == [4, 2]
    assert "blacklisted" not in job.result.stderr, job.describe()
    assert "not part of round 2; stopping it" in job.result.stderr
    assert_no_worker_left(job)


def test_host_removed_then_added_back(tmp_path):
    hosts = [h + ":1" for h in local_hosts(2)]
    job = Job(tmp_path, hosts=hosts)
    job.run("-np", 2, "--min-np", 1, "--max-np", 2,
            train_args=["--steps", 16, "--until-sizes", "2,1,2", *job.hosts_at(4, hosts[:1]),
                        *job.hosts_at(5, hosts, size=1)])
    history = assert_trained_consistently(job, size=2, steps=16)
    assert _sizes(history) == [2, 1, 2]
    assert_no_worker_left(job)


def test_survivors_below_min_np_wait_for_new_hosts_then_everyone_syncs(tmp_path):
    # Horovod issue 3494: a host leaves gracefully, the survivor is below
    # --min-np and waits; when a new host arrives, the survivor must not skip
    # the state sync the newcomer waits in.
    names = local_hosts(3)
    job = Job(tmp_path, hosts=[names[0] + ":1", names[1] + ":1"])
    enough = tmp_path / "enough"
    job.start("-np", 2, "--min-np", 2, "--max-np", 2, "--elastic-timeout", 60,
              train_args=["--steps", 14, "--until-file", enough, *job.hosts_at(4, [names[0] + ":1"])])

    def wait_for(what, condition):
        deadline = time.monotonic() + 90
        while not condition():
            assert time.monotonic() < deadline and job.process.poll() is None, \
                f"{what} never happened\n{job.stderr_so_far()}"
            time.sleep(0.1)

    wait_for("the removal", lambda: "notifying the workers: hosts removed" in job.stderr_so_far())
    time.sleep(3)  # the survivor resets and waits for a second slot
    job.set_hosts([names[0] + ":1", names[2] + ":1"])
    wait_for("the new worker's start", lambda: any(e["host"] == names[2] for e in job.events("start")))
    enough.touch()
    job.wait(timeout=90)
    history = assert_trained_consistently(job, size=2, steps=14)
    assert {size for _, size in history} == {2}
    assert {e["host"] for e in job.events("done")} == {names[0], names[2]}
    assert_no_worker_left(job)


def test_worker_failing_while_discovery_is_slow(tmp_path):
    # Horovod issue 3014: a failure while the driver handles host discovery
    # deadlocked it. Here discovery takes 2 s a run, so it is running when
    # the worker dies.
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(3)])
    job.discovery.write_text(f"#!/bin/sh\nsleep 2\ncat {job.hosts_file}\n")
    job.run("-np", 3, "--min-np", 1, train_args=["--steps", 20, "--step-seconds", 0.1, "--fail", "6:1:kill"])
    assert_trained_consistently(job, size=2, steps=20)
    assert_no_worker_left(job)


def test_host_added_before_the_workers_first_listen_is_not_missed(tmp_path):
    # The workers spend 3 s between hvd.init() and the training function, so
    # the driver announces the new host before they listen for announcements.
    hosts = [h + ":1" for h in local_hosts(3)]
    job = Job(tmp_path, hosts=hosts[:2])
    job.start("-np", 2, "--min-np", 2, "--max-np", 3,
              train_args=["--steps", 10, "--until-sizes", "2,3", "--sleep-before-training", 3])
    deadline = time.monotonic() + 60
    while "round 1:" not in job.stderr_so_far():
        assert time.monotonic() < deadline and job.process.poll() is None, job.stderr_so_far()
        time.sleep(0.1)
    job.set_hosts(hosts)
    job.wait(timeout=120)
    history = assert_trained_consistently(job, size=3, steps=10)
    assert _sizes(history) == [2, 3]
    assert len(history) < 1000, "the job never grew: the announcement was lost"
    assert_no_worker_left(job)
