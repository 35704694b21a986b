# safe_shell_exec.py - Horovod's horovod.runner.common.util.safe_shell_exec:
# run a shell command, forward its output (optionally prefixed with a rank
# index and a timestamp) and stop it, with everything it started, on request.
"""Running a shell command with its output forwarded and a way to stop it."""

import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["execute", "GRACEFUL_TERMINATION_TIME_S"]

GRACEFUL_TERMINATION_TIME_S = 5


def _forward(source, target, index, name, with_timestamp):
    for line in iter(source.readline, ""):
        if index is not None:
            stamp = time.strftime("%a %b %d %H:%M:%S %Y") + " " if with_timestamp else ""
            line = "%s[%s]<%s>:%s" % (stamp, index, name, line)
        target.write(line)
        target.flush()
    source.close()


def execute(command, env=None, stdout=None, stderr=None, index=None, events=None,
            prefix_output_with_timestamp=False):
    """Runs `command` in a shell and returns its exit code.

    Its output goes to `stdout`/`stderr` (text streams; sys.stdout/sys.stderr by
    default), each line prefixed with ``[index]<stdout>:`` when `index` is given
    (and a timestamp with `prefix_output_with_timestamp`). When any of `events`
    (threading.Event) is set, the command and every process it started get
    SIGTERM, then SIGKILL after GRACEFUL_TERMINATION_TIME_S.
    """
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    proc = subprocess.Popen(command, shell=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    pumps = [threading.Thread(target=_forward, args=(proc.stdout, stdout, index, "stdout",
                                                     prefix_output_with_timestamp), daemon=True),
             threading.Thread(target=_forward, args=(proc.stderr, stderr, index, "stderr",
                                                     prefix_output_with_timestamp), daemon=True)]
    for pump in pumps:
        pump.start()
    stop = threading.Event()

    def stop_when_told():
        while not stop.is_set():
            if any(event.is_set() for event in events or ()):
                _terminate_group(proc)
                return
            stop.wait(0.1)

    watcher = threading.Thread(target=stop_when_told, daemon=True)
    watcher.start()
    try:
        code = proc.wait()
    finally:
        stop.set()
    for pump in pumps:
        pump.join()
    return code


def _terminate_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(GRACEFUL_TERMINATION_TIME_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
