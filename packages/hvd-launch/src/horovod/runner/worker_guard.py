"""Runs one worker process and makes sure nothing of it outlives the launcher.

``horovodrun`` starts every rank through this guard, locally and over ssh:

    python -m horovod.runner.worker_guard [--signal-as-exit-code]

The first line of the guard's stdin is a JSON object ``{"argv": [...],
"env": {...}, "cwd": "..."}``; sending it over stdin keeps the job secret out
of command lines that every user on the host can read.  After that the guard
holds stdin open and treats end-of-file as "the launcher is gone" -- the ssh
connection dropped or the launcher was killed -- and stops the worker.

The worker runs in its own session, so the guard can signal the worker and
everything it spawned as one process group: SIGTERM first, SIGKILL after the
grace period.  SIGTERM, SIGINT or SIGHUP sent to the guard do the same.  When
the worker exits on its own, leftovers in its group are killed too, so a
finished rank never leaves orphans behind.

The guard exits with the worker's exit code.  When the worker was killed by
a signal the guard kills itself with the same signal, or, with
``--signal-as-exit-code`` (used over ssh, which cannot forward a signal
death), exits with 128 + the signal number.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

# Seconds between SIGTERM and SIGKILL when the guard stops its worker.
GRACE_SECONDS_ENV = "HVDRUN_KILL_GRACE_SECONDS"
DEFAULT_GRACE_SECONDS = 5.0
# How long leftovers of a worker that exited by itself get before SIGKILL.
_LEFTOVER_GRACE_SECONDS = 1.0


# Sent by the launcher on the guard's stdin (after the spec line): stop the
# worker with SIGKILL at once.
KILL_NOW = b"kill now\n"


def grace_seconds() -> float:
    """Returns the SIGTERM-to-SIGKILL grace period (``HVDRUN_KILL_GRACE_SECONDS``, default 5)."""
    try:
        return max(0.0, float(os.environ.get(GRACE_SECONDS_ENV, DEFAULT_GRACE_SECONDS)))
    except ValueError:
        return DEFAULT_GRACE_SECONDS


_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    # Orphaned grandchildren are then re-parented to the guard, which reaps
    # them; otherwise, in containers whose init does not reap, they linger as
    # zombies and look like live members of the worker's process group.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass


def _reap_orphans(worker_pid: int) -> None:
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == worker_pid:
            return  # The worker's own status is left for Popen.
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        _reap_orphans(pgid)
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Handlers first: a stop that arrives while the worker is starting must
    # reach the worker, not kill the guard and leave the worker orphaned.
    stop_requested = threading.Event()

    def request_stop(*_):
        stop_requested.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, request_stop)

    signal_as_exit_code = "--signal-as-exit-code" in args
    try:
        # Over ssh the remote shell already made us a session leader; locally
        # the launcher did.  Either way a fresh session is harmless to try.
        os.setsid()
    except OSError:
        pass

    # Raw reads on fd 0: a buffered sys.stdin blocked in a daemon thread
    # aborts the interpreter at exit.
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            return 0  # The launcher went away before sending the spec.
        line += chunk
    spec = json.loads(line)
    env = dict(os.environ)
    env.update(spec.get("env", {}))
    cwd = spec.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as e:
            sys.stderr.write(f"horovodrun: cannot enter working directory {cwd!r} on this host: "
                             f"{e.strerror}\n")
            return 126
    if stop_requested.is_set():
        return 128 + signal.SIGTERM
    _become_subreaper()
    try:
        worker = subprocess.Popen(spec["argv"], env=env, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    except OSError as e:
        sys.stderr.write(f"horovodrun: cannot start {spec['argv'][0]!r}: {e.strerror}\n")
        return 127
    pgid = worker.pid

    kill_requested = threading.Event()

    def watch_launcher():
        # Blocks until the launcher closes our stdin or disappears. Before
        # that it may send KILL_NOW: a frozen worker heeds nothing but SIGKILL,
        # and waiting out the grace period would only delay the job.
        received = b""
        try:
            while True:
                chunk = os.read(0, 4096)
                if not chunk:
                    break
                received = (received + chunk)[-len(KILL_NOW):]
                if received == KILL_NOW:
                    kill_requested.set()
                    break
        except OSError:
            pass
        stop_requested.set()

    threading.Thread(target=watch_launcher, daemon=True).start()

    kill_deadline = None
    while worker.poll() is None:
        if stop_requested.is_set():
            now = time.monotonic()
            if kill_deadline is None and not kill_requested.is_set():
                _signal_group(pgid, signal.SIGTERM)
                kill_deadline = now + grace_seconds()
            elif kill_requested.is_set() or now >= kill_deadline:
                _signal_group(pgid, signal.SIGKILL)
            time.sleep(0.05)
        else:
            stop_requested.wait(0.05)

    # The worker is gone; whatever it left running in its group goes too.
    _reap_orphans(pgid)
    if _group_alive(pgid):
        _signal_group(pgid, signal.SIGTERM)
        if not _wait_group_gone(pgid, _LEFTOVER_GRACE_SECONDS):
            _signal_group(pgid, signal.SIGKILL)

    code = worker.returncode
    if code >= 0:
        return code
    sig = -code
    if signal_as_exit_code:
        return 128 + sig
    sys.stdout.flush()
    sys.stderr.flush()
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot have handlers anyway
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    return 128 + sig  # Only reached for signals that do not terminate.


if __name__ == "__main__":
    sys.exit(main())
