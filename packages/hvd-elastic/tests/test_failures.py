"""A worker that dies, raises or freezes mid-training: the job goes on with the others,
and the parameters are exactly what the committed steps give."""

import os

import pytest

from elastic_harness import Job, assert_no_worker_left, assert_trained_consistently, base_env, local_hosts

# Each failure kind is tried this many times (a failure lands at a different
# point of the step each time); HVD_ELASTIC_TRIALS=1 for a quick run.
TRIALS = int(os.environ.get("HVD_ELASTIC_TRIALS", "10"))


@pytest.mark.parametrize("trial", range(TRIALS))
@pytest.mark.parametrize("mode", ["kill", "exception"])
def test_one_of_four_workers_fails_and_training_goes_on(tmp_path, mode, trial):
    hosts = local_hosts(4)
    job = Job(tmp_path, hosts=[h + ":1" for h in hosts])
    failing_rank = 1 + trial % 3  # never rank 0 here (see the next test)
    job.run("-np", 4, "--min-np", 2,
            train_args=["--steps", 24, "--fail", f"{7 + trial % 4}:{failing_rank}:{mode}"])
    history = assert_trained_consistently(job, size=3, steps=24)
    assert {size for _, size in history} == {4, 3}
    failing = job.events("failing")
    assert len(failing) == 1 and failing[0]["rank"] == failing_rank
    assert f"host {failing[0]['host']} blacklisted" in job.result.stderr, job.describe()
    assert "round 2: 3 rank(s)" in job.result.stderr
    assert_no_worker_left(job)


@pytest.mark.parametrize("mode", ["kill", "exception"])
def test_rank_zero_failing_hands_the_state_on_from_a_survivor(tmp_path, mode):
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(3)])
    job.run("-np", 3, "--min-np", 1, train_args=["--steps", 16, "--fail", f"6:0:{mode}"])
    history = assert_trained_consistently(job, size=2, steps=16)
    # Steps 0..5 ran at size 3 and were committed up to step 5 (commit every 2
    # steps: after steps 1, 3, 5), so the survivors resume at step 6.
    assert history[:6] == [[s, 3] for s in range(6)]
    assert all(size == 2 for _, size in history[6:])
    assert_no_worker_left(job)


def test_frozen_worker_is_stopped_and_its_host_blacklisted(tmp_path):
    hosts = local_hosts(3)
    job = Job(tmp_path, hosts=[h + ":1" for h in hosts])
    job.run("-np", 3, "--min-np", 1, train_args=["--steps", 16, "--fail", "5:2:stop"])
    assert_trained_consistently(job, size=2, steps=16)
    frozen = job.events("failing")[0]["host"]
    assert f"on {frozen} stopped responding" in job.result.stderr, job.describe()
    assert f"blacklisting {frozen}" in job.result.stderr
    # The frozen process itself was killed, not left stopped.
    assert_no_worker_left(job, within=5)


def test_fixed_hosts_give_fault_tolerance_without_discovery(tmp_path):
    hosts = local_hosts(3)
    job = Job(tmp_path)
    job.run("-np", 3, "--min-np", 2, "-H", ",".join(h + ":1" for h in hosts), discovery=False,
            train_args=["--steps", 14, "--fail", "5:2:kill"])
    assert_trained_consistently(job, size=2, steps=14)
    assert f"host {hosts[2]} blacklisted" in job.result.stderr
    assert_no_worker_left(job)


@pytest.mark.parametrize("workers", [4, 3])
def test_process_sets_survive_a_reset(tmp_path, workers):
    # Horovod issue 4021: static and dynamic process sets must exist again,
    # with the same ranks, on the engine of every new round. From 3 workers
    # to 2, the static set {0, 1} becomes the whole job (the global set
    # stands in for it) and the dynamic {0, 2} no longer fits.
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(workers)])
    job.run("-np", workers, "--min-np", workers - 1,
            train_args=["--steps", 12, "--process-sets", "--fail", f"5:{workers - 1}:kill"],
            env=base_env(HOROVOD_DYNAMIC_PROCESS_SETS=1))
    assert_trained_consistently(job, size=workers - 1, steps=12)
    if workers == 3:
        assert "does not fit the job's 2 ranks" in job.result.stderr
    assert_no_worker_left(job)
