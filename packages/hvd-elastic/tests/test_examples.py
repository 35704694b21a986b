# test_examples.py - the elastic examples (examples/elastic/) are end-to-end
# tests: each runs under the real horovodrun with its own discover_hosts.sh,
# and the test takes a host away and gives it back while it trains.
#
# Every change is made in answer to what the job has visibly done (its
# per-epoch lines, read as they come), never after a fixed sleep: on a small
# loaded machine a start-up can take many times longer than usual.
"""The elastic examples keep training while a host leaves and comes back."""

import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from elastic_harness import base_env, pid_alive

EXAMPLES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                         "examples", "elastic"))

# Both names reach this machine without ssh, and each is an elastic host of its own.
BOTH_HOSTS = ["localhost:1", "127.0.0.1:1"]
ONE_HOST = ["localhost:1"]

EPOCH_LINE = re.compile(r"^\[0\]<stdout>:epoch (\d+): size (\d+), loss ([0-9.]+|nan|inf)$")
ROUND_LINE = re.compile(r"^horovodrun: elastic: round (\d+): (\d+) rank\(s\) on (.*)$")

# Generous: a first TensorFlow import on a busy two-core machine can take tens of seconds.
START_TIMEOUT = 90.0
CHANGE_TIMEOUT = 60.0


def _importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


class ExampleJob:
    """One elastic example run under horovodrun, its output read line by line while it runs."""

    def __init__(self, tmp_path, script, args):
        self.script = script
        self.hosts_file = tmp_path / "hosts"
        self.set_hosts(BOTH_HOSTS)
        # Inherited by horovodrun and everything it starts, whatever their
        # session or parent: how leftover processes are found afterwards.
        self.marker = "hvd-example-test-" + uuid.uuid4().hex
        # (TF_CPP_MIN_LOG_LEVEL: fewer TensorFlow start-up lines in a failure's report.)
        env = base_env(ELASTIC_HOSTS_FILE=self.hosts_file, HVD_EXAMPLE_TEST_JOB=self.marker,
                       TF_CPP_MIN_LOG_LEVEL="2")
        discovery = os.path.join(os.path.dirname(script), "discover_hosts.sh")
        command = [sys.executable, "-m", "horovod.runner", "-np", "2", "--min-np", "1", "--max-np", "2",
                   "--host-discovery-script", discovery, sys.executable, script, *map(str, args)]
        self.lines = queue.Queue()
        self.stdout, self.stderr = [], []
        self.workers = set()  # pids of example processes seen while the job ran
        self.left = {}  # pid -> command line of those still running after the job ended
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                        start_new_session=True)
        self.readers = [threading.Thread(target=self._read, args=(self.process.stdout, self.stdout), daemon=True),
                        threading.Thread(target=self._read, args=(self.process.stderr, self.stderr), daemon=True)]
        for reader in self.readers:
            reader.start()

    def _read(self, stream, into):
        for line in stream:
            line = line.rstrip("\n")
            into.append((time.monotonic() - self.started, line))
            self.lines.put(line)
        self.lines.put(None)

    def set_hosts(self, hosts):
        # Replaced in one step, so discovery never reads half a file.
        tmp = str(self.hosts_file) + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.replace(tmp, self.hosts_file)

    def wait_for_epoch(self, size, timeout, what):
        """Reads the job's output until rank 0 reports an epoch trained at `size`."""
        deadline = time.monotonic() + timeout
        ended = 0
        while time.monotonic() < deadline:
            self._note_workers()
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                ended += 1  # one per stream; the job is over once both are closed
                if ended == 2:
                    break
                continue
            match = EPOCH_LINE.match(line)
            if match and int(match.group(2)) == size:
                return int(match.group(1))
        pytest.fail(f"{what}: no epoch at size {size} within {timeout:g} s\n{self.describe()}")

    def finish(self, timeout):
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._note_workers()
            time.sleep(0.2)
        try:
            self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"horovodrun did not end within {timeout:g} s\n{self.describe()}")
        for reader in self.readers:
            reader.join(timeout=10)
        self.elapsed = time.monotonic() - self.started
        return self.process.returncode

    def processes(self):
        """Pid -> argv of every process that carries this job's marker."""
        found = {}
        needle = ("HVD_EXAMPLE_TEST_JOB=" + self.marker).encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found[int(entry)] = f.read().decode(errors="replace").split("\0")
            except OSError:
                pass
        return found

    def _note_workers(self):
        # The workers themselves: `python script ...` (horovodrun's own
        # command line names the script too, further on).
        self.workers |= {pid for pid, argv in self.processes().items() if self.script in argv[:2]}

    def left_behind(self, within):
        """The job's processes still running `within` seconds after horovodrun ended."""
        deadline = time.monotonic() + within
        while True:
            alive = {pid: " ".join(argv) for pid, argv in self.processes().items() if pid_alive(pid)}
            alive.update({pid: "(a worker seen during the job)" for pid in self.workers
                          if pid not in alive and pid_alive(pid)})
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)

    def kill(self):
        """Ends whatever is left of the job (a failed test must not leave it to the next)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def epochs(self):
        """(epoch, size, loss) of each epoch rank 0 reported, in order."""
        found = []
        for _, line in self.stdout:
            match = EPOCH_LINE.match(line)
            if match:
                found.append((int(match.group(1)), int(match.group(2)), float(match.group(3))))
        return found

    def rounds(self):
        """(round, ranks) of each membership the driver formed, in order."""
        found = []
        for _, line in self.stderr:
            match = ROUND_LINE.match(line)
            if match:
                found.append((int(match.group(1)), int(match.group(2))))
        return found

    def describe(self):
        code = self.process.poll()
        return (f"horovodrun {'running' if code is None else f'exit {code}'} after "
                f"{time.monotonic() - self.started:.1f} s\n--- stderr (s since start)\n"
                + _timed(self.stderr[-80:]) + "\n--- stdout\n" + _timed(self.stdout[-60:]))

    def output(self, stream):
        return "\n".join(line for _, line in getattr(self, stream))


def _timed(lines):
    return "\n".join("%6.2f %s" % entry for entry in lines)


def run_removing_and_re_adding_a_host(tmp_path, script, args, epochs):
    """Runs `script` on two hosts, takes one away once an epoch is done, gives it back once
    an epoch was done without it, and returns the ended job."""
    job = ExampleJob(tmp_path, script, [*args, "--epochs", epochs])
    try:
        job.wait_for_epoch(2, START_TIMEOUT, "the job on both hosts")
        job.set_hosts(ONE_HOST)
        job.wait_for_epoch(1, CHANGE_TIMEOUT, "after 127.0.0.1 was removed")
        job.set_hosts(BOTH_HOSTS)
        job.wait_for_epoch(2, CHANGE_TIMEOUT, "after 127.0.0.1 was added back")
        job.finish(CHANGE_TIMEOUT)
        job.left = job.left_behind(within=5.0)
    finally:
        job.kill()
    return job


def assert_trained_through_both_changes(job, epochs):
    assert job.process.returncode == 0, job.describe()
    # The driver formed three memberships: both hosts, one, both again (the
    # last with a new worker on the host that came back).
    assert [ranks for _, ranks in job.rounds()] == [2, 1, 2], job.describe()
    assert [number for number, _ in job.rounds()] == [1, 2, 3]
    assert "started 127.0.0.1:0" in job.output("stderr"), job.describe()

    reported = job.epochs()
    # Each reset kept the state: every epoch was trained and reported exactly
    # once, in order, none started over.
    assert [epoch for epoch, _, _ in reported] == list(range(epochs)), job.describe()
    sizes = [size for _, size, _ in reported]
    assert [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s] == [2, 1, 2], sizes
    first_loss, last_loss = reported[0][2], reported[-1][2]
    assert last_loss < 0.5 * first_loss, f"the loss went from {first_loss} to {last_loss}\n{job.describe()}"
    assert f"done: {epochs} epochs, 2 worker(s) at the end" in job.output("stdout"), job.describe()

    # Two first workers and the one started for the returning host, at least:
    # the check below looked at real processes.
    assert len(job.workers) >= 3, (job.workers, job.describe())
    assert not job.left, f"processes of the job outlived it: {job.left}\n{job.describe()}"


@pytest.mark.skipif(not _importable("torch") or not _importable("horovod.torch"),
                    reason="needs torch and hvd-torch")
def test_pytorch_elastic_example_trains_on_while_a_host_leaves_and_returns(tmp_path):
    script = os.path.join(EXAMPLES, "pytorch", "pytorch_elastic_synthetic.py")
    epochs = 30
    # 512 samples in batches of 32: 8 batches a worker per epoch at size 2,
    # about 0.3 s with the delay. The job takes up a host change within a
    # second or two, so both changes land within the first few epochs (at
    # most 5 seen on a loaded machine) and 30 leave them room to spare.
    job = run_removing_and_re_adding_a_host(
        tmp_path, script, ["--samples", 512, "--batch-size", 32, "--step-delay", 0.03, "--commit-every", 2],
        epochs)
    assert_trained_through_both_changes(job, epochs)


@pytest.mark.skipif(not _importable("tensorflow") or not _importable("horovod.tensorflow"),
                    reason="needs tensorflow and hvd-tensorflow")
def test_tensorflow2_elastic_example_trains_on_while_a_host_leaves_and_returns(tmp_path):
    script = os.path.join(EXAMPLES, "tensorflow2", "tensorflow2_elastic_synthetic.py")
    epochs = 30
    job = run_removing_and_re_adding_a_host(
        tmp_path, script, ["--batches-per-epoch", 8, "--batch-size", 32, "--step-delay", 0.03, "--commit-every", 2],
        epochs)
    assert_trained_through_both_changes(job, epochs)
