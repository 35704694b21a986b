"""Helpers for hvd-elastic's tests: running elastic horovodrun jobs of elastic_train.py,
discovery scripts, reading the workers' logs, checking that no process is left behind.

(A uniquely named module rather than conftest.py, so other packages' test helpers
never shadow it.)
"""

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "elastic_train.py")
sys.path.insert(0, HERE)


def local_hosts(count):
    """`count` distinct names of this machine that horovodrun starts workers on without
    ssh, each an elastic "host" of its own (its own blacklist entry and host name)."""
    names = ["localhost", "127.0.0.1", "localhost.localdomain"]
    hostname = socket.gethostname()
    if hostname not in names:
        names.append(hostname)
    assert count <= len(names), f"this machine has only {len(names)} local host names: {names}"
    return names[:count]


def base_env(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDRUN_", "HOROVOD_"))}
    env["HVDRUN_KILL_GRACE_SECONDS"] = "2"
    # A lost peer is noticed within this many seconds (the tests' failures are real).
    env["HOROVOD_PEER_TIMEOUT_SECONDS"] = "3"
    env.update({k: str(v) for k, v in overrides.items()})
    return env


class Job:
    """One horovodrun run: its arguments, working folder and, once run, its result."""

    def __init__(self, tmp_path, hosts=None, script=TRAIN):
        self.script = script  # run with --log LOG and the train_args
        self.dir = tmp_path
        self.log = tmp_path / "log"
        self.log.mkdir()
        self.hosts_file = tmp_path / "hosts"
        self.discovery = tmp_path / "discover.sh"
        self.discovery.write_text(f"#!/bin/sh\ncat {self.hosts_file}\n")
        self.discovery.chmod(0o755)
        if hosts is not None:
            self.set_hosts(hosts)

    def set_hosts(self, hosts):
        tmp = str(self.hosts_file) + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.replace(tmp, self.hosts_file)

    def hosts_at(self, step, hosts, size=None):
        """elastic_train.py arguments: rank 0 switches discovery to `hosts` at `step` (the
        first step from there on at which the job has `size` ranks)."""
        at = f"{step}@{size}" if size is not None else str(step)
        return ["--write-at", f"{at}={self.hosts_file}:{','.join(hosts)}"]

    def horovodrun_args(self, *launcher_args, train_args=(), discovery=True):
        args = [sys.executable, "-m", "horovod.runner", *map(str, launcher_args)]
        if discovery:
            args += ["--host-discovery-script", str(self.discovery)]
        return args + [sys.executable, self.script, "--log", str(self.log), *map(str, train_args)]

    def run(self, *launcher_args, train_args=(), discovery=True, timeout=120, env=None):
        """Runs the job to its end; returns the CompletedProcess (text output)."""
        self.start(*launcher_args, train_args=train_args, discovery=discovery, env=env)
        return self.wait(timeout)

    def start(self, *launcher_args, train_args=(), discovery=True, env=None):
        """Starts the job in its own session (so a hung one can be stopped whole)."""
        self.started = time.monotonic()
        self.process = subprocess.Popen(self.horovodrun_args(*launcher_args, train_args=train_args,
                                                             discovery=discovery),
                                        env=env or base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, stdin=subprocess.DEVNULL, cwd=self.dir, start_new_session=True)
        # Read as it comes, so a test can react to what the driver says.
        self.output = {"stdout": [], "stderr": []}
        self._readers = [threading.Thread(target=self._read, args=(stream, self.output[name]), daemon=True)
                         for name, stream in (("stdout", self.process.stdout), ("stderr", self.process.stderr))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines):
        for line in stream:
            lines.append(line)

    def stderr_so_far(self):
        return "".join(self.output["stderr"])

    def wait(self, timeout=120):
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            for pid in self.pids():  # stopped workers do not die of the group's SIGKILL alone
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.wait()
            raise AssertionError(f"the job did not end within {timeout} s\n--- stderr\n"
                                 f"{self.stderr_so_far()[-6000:]}")
        finally:
            for reader in self._readers:
                reader.join(timeout=10)
        stdout, stderr = "".join(self.output["stdout"]), self.stderr_so_far()
        self.elapsed = time.monotonic() - self.started
        self.ended_at = time.time()  # comparable with the workers' log times
        self.result = subprocess.CompletedProcess(self.process.args, self.process.returncode, stdout, stderr)
        return self.result

    def events(self, kind=None):
        """Every rank's log lines, in time order."""
        found = []
        for path in glob.glob(str(self.log / "*.jsonl")):
            with open(path) as f:
                found += [json.loads(line) for line in f if line.strip()]
        found.sort(key=lambda e: e["time"])
        return [e for e in found if kind is None or e["event"] == kind]

    def pids(self):
        return {int(os.path.basename(p).rsplit(".", 2)[-2]) for p in glob.glob(str(self.log / "*.jsonl"))}

    def describe(self):
        return (f"exit {self.result.returncode} after {self.elapsed:.1f} s\n--- stderr\n{self.result.stderr[-6000:]}"
                f"\n--- stdout\n{self.result.stdout[-3000:]}")


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def assert_no_worker_left(job, within=10.0):
    """No worker process of `job` is still running (they had `within` seconds to go)."""
    deadline = time.monotonic() + within
    while True:
        alive = [pid for pid in job.pids() if pid_alive(pid)]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in alive:  # do not leave them to the next test
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not alive, f"worker processes {alive} outlived the job\n{job.describe()}"


def assert_trained_consistently(job, size, steps):
    """The job ended well with `size` ranks, each holding the parameters that the steps
    in its state's history give, and that history is steps 0..n-1 with none lost or
    repeated."""
    from elastic_train import reference_parameters
    assert job.result.returncode == 0, job.describe()
    done = job.events("done")
    assert sorted(e["rank"] for e in done) == list(range(size)), (done, job.describe())
    assert all(e["size"] == size for e in done)
    first = done[0]
    for event in done[1:]:
        assert event["params"] == first["params"], "ranks ended with different parameters"
        assert event["history"] == first["history"]
    history = first["history"]
    assert [step for step, _ in history] == list(range(len(history))), history
    assert len(history) >= steps
    reference = reference_parameters(history)
    assert max(abs(a - b) for a, b in zip(first["params"], reference)) < 1e-5, (first["params"], reference)
    return history
