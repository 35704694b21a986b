"""Runs a set of worker processes as one job: output forwarding and failure propagation.

Each worker is a local process (the worker guard, an ssh client running the
guard remotely, or ``mpirun``) in its own session, so Ctrl-C in the terminal
reaches only the launcher and the launcher decides how the job stops.

When any worker exits non-zero or is killed, every other worker is asked to
stop (SIGTERM to its guard, or its ssh stdin closed), and is SIGKILLed after
the grace period.  The job result names the first worker that failed.
"""

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO, Dict, List, Optional, Sequence

from horovod.runner.worker_guard import KILL_NOW, grace_seconds

# Extra seconds the launcher waits beyond the guard's own grace period before
# it SIGKILLs a guard (or ssh client) that did not stop.
_GUARD_SLACK_SECONDS = 3.0


def kill_deadline_seconds() -> float:
    """Seconds after asking a worker to stop before its guard (or ssh client) is SIGKILLed."""
    return grace_seconds() + _GUARD_SLACK_SECONDS


@dataclasses.dataclass
class WorkerCommand:
    """One process the job starts.

    Attributes:
        label: the output prefix id (the rank, or ``mpirun``).
        argv: the local command (guard, ssh client, or mpirun).
        env: the environment of the local process.
        guard_spec: when set, the JSON spec written to the guard's stdin.
        remote_host: the ssh host, for messages; None for local processes.
        prefix_output: prefix each output line with ``[label]<stream>:``.
        output_dir: when set, also write raw output to ``output_dir/{stdout,stderr}``.
    """

    label: str
    argv: List[str]
    env: Dict[str, str]
    guard_spec: Optional[dict] = None
    remote_host: Optional[str] = None
    prefix_output: bool = True
    output_dir: Optional[str] = None


@dataclasses.dataclass
class WorkerExit:
    """How one worker ended: exit ``code``, or ``signal`` when killed."""

    label: str
    code: Optional[int]
    signal: Optional[int]
    stopped_by_launcher: bool = False
    remote_host: Optional[str] = None
    # Why the launcher declared the worker failed while it was still running
    # (e.g. its peers reported it frozen); overrides the exit status in messages.
    reason: Optional[str] = None

    def describe(self) -> str:
        if self.reason is not None:
            return self.reason
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"was killed by signal {self.signal} ({name})"
        if self.remote_host is not None and self.code == 255:
            return (f"exited with code 255 (ssh to {self.remote_host} failed or the connection "
                    "was lost)")
        return f"exited with code {self.code}"

    @property
    def failed(self) -> bool:
        return self.reason is not None or self.signal is not None or self.code != 0


@dataclasses.dataclass
class JobResult:
    """The outcome of a job: every worker's exit, the first failure, and any interruption."""

    exits: Dict[str, WorkerExit]
    first_failure: Optional[WorkerExit]
    interrupted_by: Optional[int] = None  # the signal that stopped the launcher

    @property
    def exit_code(self) -> int:
        """The launcher's exit status: 0, the failing worker's code, or 128 + signal."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        if self.first_failure is None:
            return 0
        if self.first_failure.signal is not None:
            return 128 + self.first_failure.signal
        return self.first_failure.code or 1


class OutputWriter:
    """Serialises prefixed lines from all workers onto the launcher's streams (shared with the
    elastic driver, whose workers come and go)."""

    def __init__(self, with_timestamp: bool):
        self._lock = threading.Lock()
        self._with_timestamp = with_timestamp

    def write(self, target: BinaryIO, label: str, stream: str, line: bytes, prefix: bool) -> None:
        if prefix:
            stamp = time.strftime("%a %b %d %H:%M:%S %Y ") if self._with_timestamp else ""
            line = f"{stamp}[{label}]<{stream}>:".encode() + line
        with self._lock:
            try:
                if isinstance(target, io.TextIOBase):
                    # A replaced sys.stdout (pytest, notebooks) may have no byte buffer.
                    target.write(line.decode("utf-8", errors="replace"))
                else:
                    target.write(line)
                target.flush()
            except (BrokenPipeError, ValueError):
                pass


def _forward(pipe: BinaryIO, target: BinaryIO, writer: OutputWriter, command: WorkerCommand,
             stream: str) -> None:
    copy = None
    if command.output_dir:
        os.makedirs(command.output_dir, exist_ok=True)
        copy = open(os.path.join(command.output_dir, stream), "wb")
    try:
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            if copy is not None:
                copy.write(line)
                copy.flush()
            writer.write(target, command.label, stream, line, command.prefix_output)
    finally:
        pipe.close()
        if copy is not None:
            copy.close()


def _stdout_target() -> BinaryIO:
    return getattr(sys.stdout, "buffer", sys.stdout)


def _stderr_target() -> BinaryIO:
    return getattr(sys.stderr, "buffer", sys.stderr)


class Worker:
    """One started WorkerCommand: its process, output threads and stop requests."""

    def __init__(self, command: WorkerCommand):
        self.command = command
        self.process: Optional[subprocess.Popen] = None
        self.threads: List[threading.Thread] = []
        self.stop_sent_at: Optional[float] = None
        self.killed = False

    def start(self, writer: OutputWriter) -> None:
        self.process = subprocess.Popen(
            self.command.argv, env=self.command.env,
            stdin=subprocess.PIPE if self.command.guard_spec is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        if self.command.guard_spec is not None:
            # The spec line is followed by nothing: the guard treats end of
            # file on this pipe as the launcher going away, so it stays open.
            self.process.stdin.write(json.dumps(self.command.guard_spec).encode() + b"\n")
            self.process.stdin.flush()
        for pipe, target, stream in ((self.process.stdout, _stdout_target(), "stdout"),
                                     (self.process.stderr, _stderr_target(), "stderr")):
            thread = threading.Thread(target=_forward, args=(pipe, target, writer, self.command, stream),
                                      daemon=True)
            thread.start()
            self.threads.append(thread)

    def request_stop(self) -> None:
        """Asks the worker to stop: its guard stops the worker group with TERM, then KILL."""
        if self.process is None or self.process.poll() is not None or self.stop_sent_at is not None:
            return
        self.stop_sent_at = time.monotonic()
        if self.command.remote_host is not None:
            # The remote guard sees end of file and stops its worker; the ssh
            # client exits when the remote side is gone.
            self._close_stdin()
        else:
            self._close_stdin()
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Stops the worker at once: a frozen process heeds nothing but SIGKILL, so its
        guard (local or remote) sends that without a grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        if self.command.guard_spec is not None and self.process.stdin is not None:
            try:
                self.process.stdin.write(KILL_NOW)
                self.process.stdin.flush()
            except (OSError, ValueError):  # ValueError: closed by an earlier stop request
                pass
        self.request_stop()

    def kill_if_overdue(self, deadline_seconds: float) -> None:
        if (self.stop_sent_at is not None and not self.killed and self.process.poll() is None
                and time.monotonic() - self.stop_sent_at > deadline_seconds):
            self.killed = True
            self.kill_group()

    def kill_group(self) -> None:
        """SIGKILL to the guard's process group and, for a local guard, to its worker's
        (a session of its own): a guard that did not stop its worker in time must not
        leave it running once the guard is gone."""
        if self.command.remote_host is None and self.process is not None:
            try:
                with open(f"/proc/{self.process.pid}/task/{self.process.pid}/children") as f:
                    children = [int(pid) for pid in f.read().split()]
            except (OSError, ValueError):
                children = []
            for child in children:
                try:
                    os.killpg(child, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self._signal(signal.SIGKILL)

    def _close_stdin(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def exit_status(self) -> WorkerExit:
        code = self.process.returncode
        stopped = self.stop_sent_at is not None
        host = self.command.remote_host
        if code < 0:
            return WorkerExit(self.command.label, None, -code, stopped, host)
        if host is not None and 128 < code <= 128 + 64:
            # The remote guard reports a signal death as 128 + signal.
            return WorkerExit(self.command.label, None, code - 128, stopped, host)
        return WorkerExit(self.command.label, code, None, stopped, host)


# How long an error exit waits for a peer's death by a signal to show up
# (a guard reports its worker's death within ~100 ms; this leaves margin on
# a loaded machine).
_SIGNAL_DEATH_WINDOW_SECONDS = 1.0


def run_job(commands: Sequence[WorkerCommand], prefix_timestamp: bool = False,
            on_failure=None, verbose: bool = False, failure_probe=None) -> JobResult:
    """Starts ``commands``, forwards their output, and waits for all of them.

    When one worker fails the rest are stopped; SIGINT or SIGTERM to the
    launcher stops the whole job and is reported in ``interrupted_by``.

    Args:
        commands: the workers to start.
        prefix_timestamp: put the time in front of each forwarded line.
        on_failure: called with the first failing WorkerExit before the
            other workers are stopped (the CLI prints its message there).
        verbose: log the steps of stopping to stderr.
        failure_probe: polled while the job runs; returns a WorkerExit when a
            rank inside a worker (an mpirun rank) reported failing, else None.

    Returns:
        JobResult
    """
    writer = OutputWriter(prefix_timestamp)
    workers = [Worker(c) for c in commands]
    interrupted: List[int] = []

    def on_signal(signum, _frame):
        interrupted.append(signum)

    previous_handlers = {}
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous_handlers[sig] = signal.signal(sig, on_signal)

    exits: Dict[str, WorkerExit] = {}
    first_failure: Optional[WorkerExit] = None
    # A rank that exits with an error may only be reacting to a peer that was
    # killed (its connection closed); the killed rank's guard reports a little
    # later. An error exit is therefore named the cause only if no rank dies
    # by a signal within this window.
    suspect: Optional[WorkerExit] = None
    suspect_since = 0.0
    stopping = False
    kill_after = kill_deadline_seconds()
    try:
        for worker in workers:
            if interrupted:
                break
            worker.start(writer)
        while True:
            running = [w for w in workers if w.process is not None and w.command.label not in exits]
            newly_failed = []
            for worker in running:
                if worker.process.poll() is not None:
                    status = worker.exit_status()
                    exits[worker.command.label] = status
                    if status.failed:
                        newly_failed.append(status)
            if first_failure is None and not stopping:
                killed = [s for s in newly_failed if s.signal is not None]
                if suspect is None and newly_failed and not killed:
                    suspect, suspect_since = newly_failed[0], time.monotonic()
                window_over = (time.monotonic() - suspect_since >= _SIGNAL_DEATH_WINDOW_SECONDS
                               or all(w.process is None or w.command.label in exits for w in workers))
                cause = killed[0] if killed else (suspect if window_over else None)
                if cause is not None:
                    # mpirun's exit hides which rank failed; the probe knows.
                    reported = failure_probe(force=True) if failure_probe else None
                    first_failure = reported or cause
                    if on_failure is not None:
                        on_failure(first_failure)
            if first_failure is None and not stopping and failure_probe is not None:
                reported = failure_probe()
                if reported is not None and reported.label not in exits:
                    first_failure = reported
                    if on_failure is not None:
                        on_failure(reported)
            if not stopping and (first_failure is not None or interrupted):
                stopping = True
                if verbose:
                    sys.stderr.write("horovodrun: stopping the remaining workers\n")
                for worker in workers:
                    worker.request_stop()
            if stopping:
                for worker in workers:
                    if worker.process is not None:
                        worker.kill_if_overdue(kill_after)
            if all(w.process is None or w.command.label in exits for w in workers):
                break
            time.sleep(0.05)
        for worker in workers:
            for thread in worker.threads:
                thread.join(timeout=5)
    finally:
        # Only reached with workers still running when the loop above raised:
        # stop them through their guards, then kill whatever is left.
        alive = [w for w in workers if w.process is not None and w.process.poll() is None]
        for worker in alive:
            worker.request_stop()
        deadline = time.monotonic() + kill_after
        while alive and time.monotonic() < deadline:
            alive = [w for w in alive if w.process.poll() is None]
            time.sleep(0.05)
        for worker in alive:
            worker.kill_group()
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    return JobResult(exits, first_failure, interrupted[0] if interrupted else None)
