#!/usr/bin/env python3
# elastic_recovery_benchmark.py - how long an elastic horovodrun job takes to
# train again after it lost a worker, and after it gained a host, on this
# machine. Each measurement is one fresh job of tools/elastic_recovery_train.py
# whose "hosts" are this machine's local names (started without ssh), so the
# numbers contain the driver, the engine and process start-up, not a network.
"""Elastic recovery benchmark: worker killed -> next commit, host added -> first commit at the new size.

Usage:

    python tools/elastic_recovery_benchmark.py                    # both scenarios, 5 jobs each
    python tools/elastic_recovery_benchmark.py --repeat 3 --scenarios kill
    python tools/elastic_recovery_benchmark.py --peer-timeout 2   # HOROVOD_PEER_TIMEOUT_SECONDS for the jobs
    python tools/elastic_recovery_benchmark.py --signal STOP      # freeze the worker instead of killing it

Scenarios (each repetition is a new job; they alternate so that machine noise
hits both alike):

  kill  horovodrun -np 4 --min-np 2 over 4 one-slot hosts. At --kill-at-step,
        rank --kill-rank writes the time and sends itself SIGKILL. Recovery =
        the first commit of a surviving worker after that time minus that time.
        The target (stated by the project): recovery within
        HOROVOD_PEER_TIMEOUT_SECONDS + 3 s.
  add   horovodrun -np 2 --min-np 2 --max-np 3 over 2 hosts. Once rank 0 has
        committed --warmup-steps steps, the benchmark adds a third host to the
        file the discovery script prints, noting the time. Recovery = the first
        commit at size 3 minus that time.

Alongside the total, the time of each stage is shown, measured from the same
start: the worker events come from the per-process logs of the training job
(wall clock, one machine), the driver's from the moment its
`horovodrun: elastic: ...` lines reached this process.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "elastic_recovery_train.py")

# hvd-core's default when HOROVOD_PEER_TIMEOUT_SECONDS is not set.
ENGINE_DEFAULT_PEER_TIMEOUT_SECONDS = 5.0
TARGET_SLACK_SECONDS = 3.0  # target: recovery after a kill <= peer timeout + this


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--repeat", type=int, default=5, help="jobs per scenario (default 5)")
    parser.add_argument("--scenarios", default="kill,add", help="comma-separated: kill, add (default both)")
    parser.add_argument("--peer-timeout", type=float, default=None,
                        help="HOROVOD_PEER_TIMEOUT_SECONDS for the jobs (default: not set, the engine's 5 s, "
                             "unless this environment sets it)")
    parser.add_argument("--signal", choices=("KILL", "STOP"), default="KILL",
                        help="kill scenario: SIGKILL (default; the kernel closes the worker's sockets) or "
                             "SIGSTOP (a frozen worker: only the peer timeout notices it)")
    parser.add_argument("--kill-at-step", type=int, default=30)
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--warmup-steps", type=int, default=30,
                        help="add scenario: steps rank 0 commits at size 2 before the host is added")
    parser.add_argument("--steps-after", type=int, default=10, help="steps at the new size before the job ends")
    parser.add_argument("--step-seconds", type=float, default=0.02, help="sleep per training step")
    parser.add_argument("--job-timeout", type=float, default=180.0, help="seconds before a job is stopped")
    parser.add_argument("--keep", action="store_true", help="keep the jobs' folders (logs, driver output)")
    parser.add_argument("--json", metavar="PATH", help="write every repetition's stages to PATH")
    parser.add_argument("--verbose", action="store_true", help="print each job's driver lines")
    return parser.parse_args()


def local_host_names(count):
    """`count` names of this machine that horovodrun starts workers on without ssh; each is
    an elastic host of its own (its own blacklist entry)."""
    names = ["localhost", "127.0.0.1", "localhost.localdomain"]
    if socket.gethostname() not in names:
        names.append(socket.gethostname())
    if count > len(names):
        sys.exit("this machine has only %d distinct local host names (%s); the scenario needs %d"
                 % (len(names), ", ".join(names), count))
    return names[:count]


# --------------------------------------------------------------------------- one job


class Job:
    """One elastic horovodrun run of elastic_recovery_train.py in its own folder."""

    def __init__(self, root, name, hosts):
        self.dir = tempfile.mkdtemp(prefix=name + ".", dir=root)
        self.log = os.path.join(self.dir, "log")
        os.mkdir(self.log)
        self.hosts_file = os.path.join(self.dir, "hosts")
        self.discovery = os.path.join(self.dir, "discover.sh")
        with open(self.discovery, "w") as f:
            f.write("#!/bin/sh\ncat %s\n" % self.hosts_file)
        os.chmod(self.discovery, 0o755)
        self.set_hosts(hosts)
        self.lines = []  # (time.time() on arrival, stream, line)
        self.process = None

    def set_hosts(self, hosts):
        """Rewrites the discovery file at once (a rename); returns the time it took effect."""
        tmp = self.hosts_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.replace(tmp, self.hosts_file)
        return time.time()

    def start(self, launcher_args, train_args, env):
        cmd = [sys.executable, "-m", "horovod.runner", *launcher_args, "--host-discovery-script", self.discovery,
               sys.executable, TRAIN, "--log", self.log, *train_args]
        # A session of its own: a job left over after --job-timeout is stopped as a group.
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                        env=env, cwd=self.dir, text=True, bufsize=1, start_new_session=True)
        self._readers = [threading.Thread(target=self._read, args=(stream, name), daemon=True)
                         for stream, name in ((self.process.stdout, "out"), (self.process.stderr, "err"))]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, name):
        for line in stream:
            self.lines.append((time.time(), name, line.rstrip("\n")))

    def wait(self, timeout):
        """The job's exit status, or None when it had to be stopped after `timeout` s."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    pass
            code = None
        for reader in self._readers:
            reader.join(timeout=5)
        with open(os.path.join(self.dir, "horovodrun.txt"), "w") as f:
            f.writelines("%.6f %s %s\n" % line for line in self.lines)
        return code

    def events(self):
        """Every event the workers logged, oldest first."""
        out = []
        for path in glob.glob(os.path.join(self.log, "*.jsonl")):
            with open(path) as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:  # a line cut short by SIGKILL
                        pass
        return sorted(out, key=lambda e: e["time"])

    def driver_lines(self):
        """(time, message) of the driver's `horovodrun: elastic: ...` lines."""
        prefix = "horovodrun: elastic: "
        return [(t, line[len(prefix):]) for t, stream, line in self.lines if line.startswith(prefix)]

    def first_driver_line(self, after, pattern):
        return next((t for t, message in self.driver_lines() if t >= after and re.search(pattern, message)), None)

    def tail(self, n=15):
        return "\n".join("    " + line for _, _, line in self.lines[-n:])


def wait_for_step(job, rank, step, deadline):
    """Waits until `rank` logged a commit of `step` or later; False if the job ended or the deadline passed."""
    while time.monotonic() < deadline and job.process.poll() is None:
        for path in glob.glob(os.path.join(job.log, "*.jsonl")):
            try:
                with open(path) as f:
                    lines = f.readlines()
            except OSError:
                continue
            for line in reversed(lines):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event["event"] == "commit" and event["rank"] == rank and event["step"] >= step:
                    return True
        time.sleep(0.02)
    return False


# --------------------------------------------------------------------------- scenarios


def job_env(args):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_", "HOROVOD_CROSS_",
                                "HOROVOD_GLOO_RENDEZVOUS", "HOROVOD_HOSTNAME", "HOROVOD_ELASTIC"))}
    if args.peer_timeout is not None:
        env["HOROVOD_PEER_TIMEOUT_SECONDS"] = "%g" % args.peer_timeout
    return env


def since(reference, t):
    return None if t is None or reference is None else t - reference


def run_kill(args, root):
    """One job of the kill scenario: its stages in seconds after the kill (None: not seen)."""
    job = Job(root, "kill", local_host_names(4))
    train_args = ["--kill-at-step", str(args.kill_at_step), "--kill-rank", str(args.kill_rank),
                  "--kill-signal", args.signal, "--until-size", "3", "--steps-after", str(args.steps_after),
                  "--step-seconds", str(args.step_seconds)]
    job.start(["-np", "4", "--min-np", "2"], train_args, job_env(args))
    code = job.wait(args.job_timeout)
    events = job.events()
    kill = next((e for e in events if e["event"] == "kill"), None)
    result = {"scenario": "kill", "dir": job.dir, "exit_code": code}
    if kill is None:
        result["error"] = "no worker logged the kill"
        return result, job
    t0 = kill["time"]
    after = [e for e in events if e["time"] >= t0 and e["worker"] != kill["worker"]]

    def first(event):
        # A commit counts only for a step after the killed one: the survivors
        # may log the commit of the step the killed rank took part in a moment
        # after the kill time.
        return next((e["time"] for e in after
                     if e["event"] == event and (event != "commit" or e["step"] > kill["step"])), None)

    stages = {
        "survivor sees the error": since(t0, first("error")),
        "driver sees the worker gone": since(t0, job.first_driver_line(t0, r"killed by signal|exited|stopped "
                                                                          r"responding|stopping it")),
        "driver forms the new round": since(t0, job.first_driver_line(t0, r"^round \d+:")),
        "engines up in the new round": since(t0, first("reset")),
        "state synced, training resumed": since(t0, first("start")),
        "first commit (recovery)": since(t0, first("commit")),
    }
    result.update(stages=stages, recovery=stages["first commit (recovery)"],
                  size_after=next((e["size"] for e in after if e["event"] == "commit" and e["step"] > kill["step"]),
                                  None),
                  error_message=next((e.get("message") for e in after if e["event"] == "error"), None))
    if result["recovery"] is None:
        result["error"] = "no surviving worker committed after the kill"
    return result, job


def run_add(args, root):
    """One job of the add scenario: its stages in seconds after the host was added."""
    hosts = local_host_names(3)
    job = Job(root, "add", hosts[:2])
    train_args = ["--until-size", "3", "--steps-after", str(args.steps_after), "--step-seconds",
                  str(args.step_seconds)]
    job.start(["-np", "2", "--min-np", "2", "--max-np", "3"], train_args, job_env(args))
    result = {"scenario": "add", "dir": job.dir}
    t0 = None
    if wait_for_step(job, 0, args.warmup_steps, time.monotonic() + args.job_timeout):
        t0 = job.set_hosts(hosts)
    result["exit_code"] = job.wait(args.job_timeout)
    if t0 is None:
        result["error"] = "the job never reached step %d at size 2" % args.warmup_steps
        return result, job
    events = [e for e in job.events() if e["time"] >= t0]

    def first(event, size=None):
        return next((e for e in events if e["event"] == event and (size is None or e["size"] == size)), None)

    def at(event):
        return None if event is None else event["time"]

    newcomer = first("process", size=3)
    stages = {
        "driver's discovery sees the host": since(t0, job.first_driver_line(t0, r"^hosts changed")),
        "driver notifies the workers": since(t0, job.first_driver_line(t0, r"^notifying the workers")),
        "workers interrupted at a commit": since(t0, at(first("interrupt"))),
        "driver forms the round, starts newcomer": since(t0, job.first_driver_line(t0, r"^round \d+:")),
        "newcomer: interpreter running": since(t0, newcomer and newcomer["started"]),
        "newcomer: torch imported": since(t0, newcomer and newcomer["torch_imported"]),
        "newcomer: hvd.init() returned": since(t0, newcomer and newcomer["initialised"]),
        "old ranks: engines up at size 3": since(t0, at(first("reset", size=3))),
        "newcomer: model and optimizer built": since(t0, newcomer and newcomer["built"]),
        "state synced, training resumed": since(t0, at(first("start", size=3))),
        "first commit at size 3 (recovery)": since(t0, at(first("commit", size=3))),
    }
    result.update(stages=stages, recovery=stages["first commit at size 3 (recovery)"])
    if result["recovery"] is None:
        result["error"] = "no commit at size 3 after the host was added"
    return result, job


# --------------------------------------------------------------------------- report


def fmt(seconds):
    return "-" if seconds is None else "%.2f" % seconds


def summary_table(results):
    """Markdown: one row per stage, min/median/max over the repetitions that saw it."""
    names = list(results[0]["stages"])
    print("| stage (s after the start) | min | median | max | n |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        values = [r["stages"][name] for r in results if r["stages"].get(name) is not None]
        if not values:
            print("| %s | - | - | - | 0 |" % name)
            continue
        print("| %s | %.2f | %.2f | %.2f | %d |" % (name, min(values), statistics.median(values), max(values),
                                                    len(values)))


def report(scenario, results, peer_timeout, args):
    good = [r for r in results if r.get("recovery") is not None]
    print()
    if scenario == "kill":
        print("## kill: SIG%s on rank %d at step %d, 4 -> 3 ranks; recovery = kill -> first commit of a survivor"
              % (args.signal, args.kill_rank, args.kill_at_step))
    else:
        print("## add: host added to discovery at step >= %d, 2 -> 3 ranks; recovery = hosts file rewritten -> "
              "first commit at size 3" % args.warmup_steps)
    for i, r in enumerate(results):
        line = "  job %d: recovery %s s" % (i + 1, fmt(r.get("recovery")))
        if r.get("exit_code") != 0:
            line += "; horovodrun exit status %s" % r.get("exit_code")
        if r.get("error"):
            line += "; %s (folder %s)" % (r["error"], r["dir"])
        print(line)
    if not good:
        print("  no repetition measured a recovery")
        return None
    print()
    summary_table(good)
    values = [r["recovery"] for r in good]
    print()
    print("recovery over %d job(s): min %.2f s, median %.2f s, max %.2f s"
          % (len(values), min(values), statistics.median(values), max(values)))
    if scenario == "kill":
        messages = sorted({r["error_message"] for r in good if r.get("error_message")})
        if messages:
            print("a survivor's engine error (first job): %s" % messages[0])
        target = peer_timeout + TARGET_SLACK_SECONDS
        met = max(values) <= target and len(good) == len(results)
        what = "a kill" if args.signal == "KILL" else "a freeze (SIGSTOP; the target is stated for kills)"
        print("target: recovery after %s <= HOROVOD_PEER_TIMEOUT_SECONDS + %g s = %g s: %s (max %.2f s%s)"
              % (what, TARGET_SLACK_SECONDS, target, "met" if met else "NOT met", max(values),
                 "" if len(good) == len(results) else "; %d job(s) did not recover" % (len(results) - len(good))))
    return values


def load_average():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "unknown"


def main():
    args = parse_args()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for s in scenarios:
        if s not in ("kill", "add"):
            sys.exit("unknown scenario %r (kill, add)" % s)
    if args.peer_timeout is not None:
        peer_timeout, source = args.peer_timeout, "--peer-timeout"
    elif os.environ.get("HOROVOD_PEER_TIMEOUT_SECONDS"):
        peer_timeout, source = float(os.environ["HOROVOD_PEER_TIMEOUT_SECONDS"]), "from the environment"
    else:
        peer_timeout, source = ENGINE_DEFAULT_PEER_TIMEOUT_SECONDS, "the engine's default"
    print("HOROVOD_PEER_TIMEOUT_SECONDS = %g (%s); %d job(s) per scenario; %d CPU(s) on this machine; hosts: %s"
          % (peer_timeout, source, args.repeat, os.cpu_count() or 0, ", ".join(local_host_names(3))
             + (", " + local_host_names(4)[3] if "kill" in scenarios else "")))
    try:
        import horovod
        print("horovod %s from %s; python %s" % (horovod.__version__, os.path.dirname(horovod.__file__),
                                                 sys.version.split()[0]))
    except ImportError:
        sys.exit("horovod is not importable from %s (install hvd-core, hvd-launch, hvd-elastic, hvd-torch)"
                 % sys.executable)
    print("load average at the start: %s" % load_average())
    root = tempfile.mkdtemp(prefix="hvd-elastic-recovery.")
    runners = {"kill": run_kill, "add": run_add}
    results = {s: [] for s in scenarios}
    try:
        for i in range(args.repeat):
            for scenario in scenarios:
                started = time.monotonic()
                result, job = runners[scenario](args, root)
                results[scenario].append(result)
                print("[%s %d/%d] recovery %s s (job took %.1f s)%s"
                      % (scenario, i + 1, args.repeat, fmt(result.get("recovery")), time.monotonic() - started,
                         "; " + result["error"] if result.get("error") else ""), flush=True)
                if args.verbose or result.get("error"):
                    print("\n".join("    %+.3f %s" % (t - job.lines[0][0] if job.lines else 0, m)
                                    for t, m in job.driver_lines()))
                if result.get("error"):
                    print(job.tail())
        print("load average at the end: %s (other work on the machine shows here)" % load_average())
        for scenario in scenarios:
            report(scenario, results[scenario], peer_timeout, args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"peer_timeout_seconds": peer_timeout, "args": vars(args), "results": results}, f,
                          indent=1)
    finally:
        if args.keep:
            print("\njob folders kept under %s" % root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
