"""An elastic job across real "hosts" (network namespaces from the workplace's
fake_hosts.sh, reached over ssh): one host is lost outright mid-training (every process
on it killed and its link cut), and the job goes on with the others."""

import os
import shutil
import subprocess
import time

import pytest

from elastic_harness import Job, assert_trained_consistently

# The same tool and the same conditions as hvd-launch's multi-host tests (their conftest.py).
FAKE_HOSTS = os.environ.get("HVD_FAKE_HOSTS") or os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "shared", "tools", "fake_hosts.sh"))


def _fake_hosts(*args):
    return subprocess.run(["bash", FAKE_HOSTS, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def three_hosts():
    if not os.path.exists(FAKE_HOSTS):
        pytest.skip(f"multi-host tests need fake_hosts.sh (not found at {FAKE_HOSTS}; set HVD_FAKE_HOSTS)")
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("multi-host tests need root, iproute2 and openssh-server (network namespaces with sshd)")
    _fake_hosts("down")
    result = _fake_hosts("up", "3")
    if result.returncode != 0:
        pytest.fail(f"fake_hosts.sh up failed: {result.stderr}")
    yield ["fh1", "fh2", "fh3"]
    _fake_hosts("down")


def test_job_goes_on_after_a_host_is_lost(tmp_path, three_hosts):
    job = Job(tmp_path)
    trained = tmp_path / "trained"  # written by rank 0 at step 20: steps at size 3 are committed
    job.start("-np", 3, "--min-np", 2, "-H", ",".join(h + ":1" for h in three_hosts), discovery=False,
              train_args=["--steps", 300, "--step-seconds", 0.05, "--write-at", f"20={trained}:x"])
    deadline = time.monotonic() + 90
    while not trained.exists():
        assert time.monotonic() < deadline and job.process.poll() is None, job.stderr_so_far()
        time.sleep(0.2)
    crash = _fake_hosts("crash", "fh3")
    assert crash.returncode == 0, crash.stderr
    job.wait(timeout=180)
    # The lost host's worker cannot exit or report: it is found by its silence.
    assert "fh3 stopped responding" in job.result.stderr and "host fh3 blacklisted" in job.result.stderr, \
        job.describe()
    history = assert_trained_consistently(job, size=2, steps=300)
    assert {size for _, size in history} == {3, 2}
    assert {e["host"] for e in job.events("done")} == {"fh1", "fh2"}
