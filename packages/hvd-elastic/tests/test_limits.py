"""The ways an elastic job ends without finishing its training: each with the right
message, within its deadline, and with no process left behind."""

from horovod.runner.elastic.constants import RESET_LIMIT_EXCEEDED_MESSAGE, WORKERS_FAILED_MESSAGE

from elastic_harness import Job, assert_no_worker_left, assert_trained_consistently, local_hosts
from elastic_train import size_stretches


def test_blacklisted_host_comes_back_after_its_cooldown(tmp_path):
    hosts = local_hosts(2)
    job = Job(tmp_path, hosts=[h + ":1" for h in hosts])
    job.run("-np", 2, "--min-np", 1, "--blacklist-cooldown-range", 1, 2,
            train_args=["--steps", 10, "--until-sizes", "2,1,2", "--fail", "3:1:exception"])
    history = assert_trained_consistently(job, size=2, steps=10)
    assert size_stretches(history) == [2, 1, 2]
    failed_host = job.events("failing")[0]["host"]
    assert f"host {failed_host} blacklisted" in job.result.stderr
    # The host's new worker is a new process.
    assert len({e["worker"] for e in job.events("start") if e["host"] == failed_host}) == 2
    assert_no_worker_left(job)


def test_reset_limit_ends_the_job(tmp_path):
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(3)])
    job.run("-np", 3, "--min-np", 1, "--reset-limit", 1,
            train_args=["--steps", 40, "--fail", "3:1:exception", "--fail", "8:1:exception"])
    assert job.result.returncode != 0
    assert RESET_LIMIT_EXCEEDED_MESSAGE.format(1) in job.result.stderr, job.describe()
    assert not job.events("done")
    assert_no_worker_left(job)


def test_every_host_blacklisted_ends_the_job(tmp_path):
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(2)])
    job.run("-np", 2, "--min-np", 1, "--blacklist-cooldown-range", 1, 2,
            train_args=["--steps", 40, "--fail", "3:0:exception", "--fail", "3:1:exception"])
    assert job.result.returncode != 0
    assert WORKERS_FAILED_MESSAGE in job.result.stderr, job.describe()
    assert job.elapsed < 60
    assert_no_worker_left(job)


def test_too_few_slots_for_min_np_ends_the_job_after_the_elastic_timeout(tmp_path):
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(2)])
    job.run("-np", 2, "--min-np", 2, "--elastic-timeout", 3,
            train_args=["--steps", 400, "--fail", "3:1:kill"])
    assert job.result.returncode != 0
    stderr = job.result.stderr
    assert "only 1 slot(s) available after waiting 3 s (--elastic-timeout), but the job needs at least 2" \
        in stderr, job.describe()
    # The timeout counts from the reset: failure noticed, 3 s, then the workers stopped.
    assert job.ended_at - job.events("failing")[0]["time"] < 20
    assert_no_worker_left(job)


def test_first_discovery_failure_is_fatal_and_shows_the_scripts_stderr(tmp_path):
    job = Job(tmp_path)
    job.discovery.write_text("#!/bin/sh\necho 'no cloud credentials' >&2\nexit 3\n")
    job.run("-np", 2, "--min-np", 1, timeout=30)
    assert job.result.returncode != 0
    assert "exited with code 3" in job.result.stderr and "no cloud credentials" in job.result.stderr, \
        job.describe()
    assert not job.pids()  # no worker was started
    assert job.elapsed < 15


def test_hanging_discovery_script_is_stopped(tmp_path):
    job = Job(tmp_path)
    job.discovery.write_text("#!/bin/sh\nsleep 100\n")
    job.run("-np", 2, "--min-np", 1, "--elastic-timeout", 2, timeout=30)
    assert job.result.returncode != 0
    assert "did not finish within 2 s" in job.result.stderr, job.describe()
    assert job.elapsed < 15


def test_discovery_failing_later_is_retried_until_the_elastic_timeout(tmp_path):
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(2)])
    broken = tmp_path / "broken"
    job.discovery.write_text(f"#!/bin/sh\nif [ -e {broken} ]; then echo 'api down' >&2; exit 1; fi\n"
                             f"cat {job.hosts_file}\n")
    job.run("-np", 2, "--min-np", 1, "--elastic-timeout", 3,
            train_args=["--steps", 100000, "--write-at", f"5={broken}:x"])
    assert job.result.returncode != 0
    stderr = job.result.stderr
    assert "host discovery failed (retrying with the last known hosts)" in stderr, job.describe()
    assert "host discovery kept failing for more than 3 s (--elastic-timeout)" in stderr and "api down" in stderr
    assert_no_worker_left(job)
