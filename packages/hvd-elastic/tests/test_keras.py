"""Keras model.fit with hvd's elastic callbacks, under the real driver: a worker killed
mid-epoch, and a host added during training."""

import os

import pytest

from elastic_harness import HERE, Job, assert_no_worker_left, local_hosts

pytest.importorskip("tensorflow")

SCRIPT = os.path.join(HERE, "keras_elastic_fit.py")


def _assert_same_weights(job, size, epochs):
    assert job.result.returncode == 0, job.describe()
    done = job.events("done")
    assert sorted(e["rank"] for e in done) == list(range(size)), job.describe()
    assert all(e["weights"] == done[0]["weights"] for e in done)
    assert all(e["epoch"] == epochs for e in done), done


def test_fit_goes_on_after_a_worker_is_killed(tmp_path):
    job = Job(tmp_path, hosts=[h + ":1" for h in local_hosts(3)], script=SCRIPT)
    job.run("-np", 3, "--min-np", 2, train_args=["--epochs", 4, "--kill-at-epoch", 1], timeout=240)
    _assert_same_weights(job, size=2, epochs=4)
    restarts = [e for e in job.events("start") if e["size"] == 2]
    assert restarts and all(e["epoch"] >= 1 for e in restarts), job.events("start")
    assert_no_worker_left(job)


def test_new_worker_joins_a_running_fit(tmp_path):
    hosts = [h + ":1" for h in local_hosts(3)]
    job = Job(tmp_path, hosts=hosts[:2], script=SCRIPT)
    job.run("-np", 2, "--min-np", 2, "--max-np", 3, timeout=240,
            train_args=["--epochs", 8, "--hosts-file", job.hosts_file, "--add-hosts-at-epoch", 1,
                        "--add-hosts", ",".join(hosts)])
    _assert_same_weights(job, size=3, epochs=8)
    newcomer = [e for e in job.events("start") if e["host"] == local_hosts(3)[2]]
    assert len(newcomer) == 1 and newcomer[0]["epoch"] >= 1
    assert_no_worker_left(job)


def test_new_worker_with_an_unbuilt_optimizer_joins_a_custom_training_loop(tmp_path):
    hosts = [h + ":1" for h in local_hosts(3)]
    job = Job(tmp_path, hosts=hosts[:2], script=os.path.join(HERE, "tf_elastic_loop.py"))
    job.run("-np", 2, "--min-np", 2, "--max-np", 3, timeout=240,
            train_args=["--hosts-file", job.hosts_file, "--add-hosts", ",".join(hosts), "--final-size", 3])
    assert job.result.returncode == 0, job.describe()
    done = job.events("done")
    assert sorted(e["rank"] for e in done) == [0, 1, 2], job.describe()
    assert all(e["weights"] == done[0]["weights"] for e in done)
    newcomer = next(e for e in done if e["host"] == local_hosts(3)[2])
    assert newcomer["starts"][0][0] >= 3  # it started from the others' state
    assert_no_worker_left(job)
