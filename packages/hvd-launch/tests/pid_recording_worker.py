"""A rank of test_failure_propagation.py and test_ssh_launch.py: starts a grandchild, records
both pids, then does what its action says, so the test can check that nothing outlives the job.

    python pid_recording_worker.py DIR [--stagger S] [RANK=ACTION ...]

Writes "PID CHILD_PID" to DIR/pids.<rank>, waits 0.5 + rank * S seconds, then acts:
exitN (exit with status N), kill (SIGKILL itself), ignore-term (ignore SIGTERM, then
sleep), done (exit 0), freeze-guard (SIGSTOP the guard process first, so it can no
longer stop this rank) or, by default, sleep for 300 s.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--stagger", type=float, default=0.0)
    parser.add_argument("actions", nargs="*", metavar="RANK=ACTION")
    args = parser.parse_intermixed_args()
    rank = int(os.environ["HOROVOD_RANK"])
    child = subprocess.Popen(["sleep", "300"])
    with open(os.path.join(args.directory, "pids.%d" % rank), "w") as f:
        f.write("%d %d" % (os.getpid(), child.pid))
    action = dict(a.split("=") for a in args.actions).get(str(rank), "sleep")
    if action == "freeze-guard":
        os.kill(os.getppid(), signal.SIGSTOP)  # the guard can no longer stop this rank
    time.sleep(0.5 + rank * args.stagger)
    if action.startswith("exit"):
        sys.exit(int(action[4:]))
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if action == "done":
        sys.exit(0)
    time.sleep(300)


if __name__ == "__main__":
    main()
