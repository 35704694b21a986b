#!/usr/bin/env python3
# across_hosts_benchmark.py - allreduce across hosts: bus bandwidth against the
# links' limit and Open MPI, and small-message latency, with hvd and Open MPI
# run in the same sitting on the same hosts. The ranks run
# allreduce_benchmark.py's workers, so both tools time the same way.
"""Allreduce across hosts: hvd (horovodrun) vs Open MPI (mpirun), same hosts, same run.

Usage:

    # the standard scenarios on this machine's fake hosts (needs root; brings
    # the hosts up and down itself):
    python tools/across_hosts_benchmark.py --fake-hosts ../shared/tools/fake_hosts.sh
    python tools/across_hosts_benchmark.py --fake-hosts ... --scenarios latency-4,latency-8

    # hosts of your own (reachable by ssh under the same paths, sharing
    # --work-dir, e.g. a network filesystem):
    python tools/across_hosts_benchmark.py --hosts node1:2,node2:2 --sizes 16M,64M,256M \\
        --link-gbit 25 --work-dir /shared/tmp

Scenarios (with --fake-hosts):
  bandwidth-2x2   2 hosts x 2 ranks, each host's link limited to 4 Gbit/s, 16-256 MiB
  bandwidth-4x1   4 hosts x 1 rank, 4 Gbit/s links, 16-256 MiB
  latency-4       4 hosts x 1 rank, unlimited links, 4 B
  latency-8       8 hosts x 1 rank, unlimited links, 4 B
  protected-2x1   2 hosts x 1 rank, 4 Gbit/s links, 4 B-64 MiB, with HOROVOD_DATA_AUTH=1 and
                  HOROVOD_DATA_ENCRYPT=1 beside the plain engine (only when named)

Backends: hvd (horovodrun -H, the engine's defaults), hvd-flat (the same with
HOROVOD_HIERARCHICAL_ALLREDUCE=0; bandwidth scenarios with several ranks a
host), hvd-spin (HOROVOD_SPIN_WAIT=1; latency scenarios), hvd-auth and hvd-encrypt
(HOROVOD_DATA_AUTH=1, HOROVOD_DATA_ENCRYPT=1: the protected data plane), and Open MPI
(mpirun -H with mpi4py, `--mca mpi_yield_when_idle 1`, as a job on shared
cores should run it).

Reported per size: latency (median over iterations of the slowest rank's
time), bus bandwidth (algbw * 2(P-1)/P), and where the link rate is known
`of limit`: the time the links allow divided by the time taken (1.0 = at the
limit). An allreduce of S bytes over H hosts must move at least
2(H-1)/H * S bytes over each host's link in each direction, however the ranks
inside a host share the work.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import allreduce_benchmark as ab  # noqa: E402  (the shared worker and size helpers)

RATE_GBIT = 4
SCENARIOS = {
    # name: (hosts, ranks per host, link rate in Gbit/s or None, sizes, extra hvd variants)
    "bandwidth-2x2": (2, 2, RATE_GBIT, "16M,64M,256M", ("hvd-flat",)),
    "bandwidth-4x1": (4, 1, RATE_GBIT, "16M,64M,256M", ()),
    "latency-4": (4, 1, None, "4", ("hvd-spin",)),
    "latency-8": (8, 1, None, "4", ("hvd-spin",)),
    # not run by default: what HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT cost at a limited link
    "protected-2x1": (2, 1, RATE_GBIT, "4,1M,16M,64M", ("hvd-auth", "hvd-encrypt")),
}
DEFAULT_SCENARIOS = ("bandwidth-2x2", "bandwidth-4x1", "latency-4", "latency-8")
VARIANT_ENV = {
    "hvd": {},
    "hvd-flat": {"HOROVOD_HIERARCHICAL_ALLREDUCE": "0"},
    "hvd-spin": {"HOROVOD_SPIN_WAIT": "1"},
    "hvd-auth": {"HOROVOD_DATA_AUTH": "1"},
    "hvd-encrypt": {"HOROVOD_DATA_ENCRYPT": "1"},
}


def host_list(spec):
    """'a:2,b:2' -> [('a', 2), ('b', 2)]."""
    out = []
    for item in spec.split(","):
        name, _, slots = item.strip().partition(":")
        out.append((name, int(slots or 1)))
    return out


def link_limit_s(size, hosts, gbit):
    """Seconds the links need at least for an allreduce of `size` bytes over `hosts` hosts."""
    if not gbit or hosts < 2:
        return None
    return 2.0 * (hosts - 1) / hosts * size / (gbit * 1e9 / 8)


def _env_for_mpi(env):
    # Open MPI passes only what -x names to remote ranks.
    names = [k for k in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HVD_CORE_LIBRARY") if env.get(k)]
    return [arg for k in names for arg in ("-x", k)]


def run_once(backend, hosts_spec, plan, opts, work_dir):
    """One job of `backend` on the hosts; per size, the per-iteration times of the slowest rank."""
    nproc = sum(n for _, n in host_list(hosts_spec))
    with tempfile.TemporaryDirectory(prefix="hvd-xhost-bench-", dir=work_dir) as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump({"plan": plan, "copy_max_size": 0, "collective": "allreduce",
                       "time_per_size": opts.time_per_size, "min_iters": opts.min_iters}, f)
        worker = [sys.executable, os.path.join(HERE, "allreduce_benchmark.py"), "--spec", spec_path, "--out", tmp]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if backend == "mpi":
            mpirun = ab.find_mpirun()
            env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
            cmd = ([mpirun, "-np", str(nproc), "-H", hosts_spec, "--bind-to", "none", "--oversubscribe",
                    "--mca", "mpi_yield_when_idle", "1"] + _env_for_mpi(env) + worker + ["--worker", "mpi"])
        else:
            env = {k: v for k, v in env.items() if not k.startswith("HOROVOD_")}
            env.update(VARIANT_ENV[backend])
            cmd = [sys.executable, "-m", "horovod.runner", "-np", str(nproc), "-H", hosts_spec] + worker + [
                "--worker", "hvd"]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=opts.timeout, stdin=subprocess.DEVNULL)
            ok, log = proc.returncode == 0, proc.stdout
        except subprocess.TimeoutExpired as e:
            ok, log = False, "(killed after %d s)\n%s" % (opts.timeout, e.stdout or "")
        wall = time.monotonic() - t0
        payloads = ab.read_rank_payloads(tmp, nproc)
        if not ok or len(payloads) != nproc:
            print("  ! %s failed; its output:\n%s" % (backend, log[-4000:]), flush=True)
            return None
    return {"wall_s": wall, "results": ab.slowest_per_iteration(payloads)}


def measure(hosts_spec, sizes, backends, opts, work_dir, gbit):
    """Runs every backend opts.repeat times, interleaved; returns {backend: {size: median seconds}}."""
    plan = [(s, ab.iterations_for(s, opts.iters_scale)) for s in sizes]
    raw = {b: [] for b in backends}
    for rep in range(opts.repeat):
        for b in backends:
            print("  %s on %s (run %d/%d) ..." % (b, hosts_spec, rep + 1, opts.repeat), flush=True)
            r = run_once(b, hosts_spec, plan, opts, work_dir)
            if r:
                raw[b].append(r)
    medians = {}
    for b, runs in raw.items():
        if runs:
            medians[b] = {s: statistics.median(statistics.median(r["results"][s]) for r in runs) for s in sizes}
    return medians


def table(hosts_spec, sizes, medians, gbit, markdown):
    hosts = host_list(hosts_spec)
    nproc = sum(n for _, n in hosts)
    have = [b for b in list(VARIANT_ENV) + ["mpi"] if b in medians]
    head = ["size"]
    for b in have:
        head += ["%s time" % b, "%s GB/s" % b]
        if gbit:
            head.append("%s of limit" % b)
    if "hvd" in have and "mpi" in have:
        head.append("hvd/mpi")
    rows = []
    for s in sizes:
        row = [ab.fmt_size(s)]
        for b in have:
            t = medians[b][s]
            row.append("%.1f ms" % (t * 1e3) if s >= 1 << 20 else "%.1f us" % (t * 1e6))
            row.append("%.3f" % ab.busbw(s, t, nproc))
            if gbit:
                row.append("%.2f" % (link_limit_s(s, len(hosts), gbit) / t))
        if "hvd" in have and "mpi" in have:
            row.append("%.2f" % (medians["mpi"][s] / medians["hvd"][s]))
        rows.append(row)
    return ab.render_table(head, rows, markdown)


def target_lines(name, hosts_spec, sizes, medians, gbit):
    """The targets of the across-hosts issue, checked on every run."""
    lines = []
    hvd, mpi = medians.get("hvd"), medians.get("mpi")
    if not hvd:
        return lines
    hosts = len(host_list(hosts_spec))
    for s in sizes:
        if gbit and s >= 16 << 20:  # the link-limit target is for bandwidth, not latency
            frac = link_limit_s(s, hosts, gbit) / hvd[s]
            lines.append("%s %s: hvd at %.2fx the link limit (target >= 0.90)  [%s]"
                         % (name, ab.fmt_size(s), frac, "met" if frac >= 0.9 else "NOT met"))
            if mpi:
                ratio = mpi[s] / hvd[s]
                lines.append("%s %s: hvd %.2fx Open MPI's bandwidth (target >= 1.00)  [%s]"
                             % (name, ab.fmt_size(s), ratio, "met" if ratio >= 1.0 else "NOT met"))
        elif mpi and not gbit:
            ratio = hvd[s] / mpi[s]
            lines.append("%s %s: hvd latency %.1f us = %.2fx Open MPI's %.1f us (target <= 2.00)  [%s]"
                         % (name, ab.fmt_size(s), hvd[s] * 1e6, ratio, mpi[s] * 1e6,
                            "met" if ratio <= 2.0 else "NOT met"))
    return lines


def fake_hosts(script, *args):
    subprocess.run(["bash", script] + list(args), check=True, stdout=subprocess.DEVNULL)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--fake-hosts", metavar="SCRIPT", help="path of fake_hosts.sh: run the standard scenarios")
    where.add_argument("--hosts", help="run on these hosts (horovodrun -H syntax, e.g. node1:2,node2:2)")
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                    help="with --fake-hosts: comma-separated subset of %s" % ", ".join(SCENARIOS))
    ap.add_argument("--sizes", default="4,16M,64M,256M", help="with --hosts: comma-separated sizes")
    ap.add_argument("--link-gbit", type=float, help="with --hosts: each host's link rate, for the limit column")
    ap.add_argument("--backends", default="hvd,mpi",
                    help="with --hosts: comma-separated subset of %s" % ", ".join(list(VARIANT_ENV) + ["mpi"]))
    ap.add_argument("--work-dir", default=None, help="a directory every host sees (default: the temp dir)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per backend, interleaved (default 2)")
    ap.add_argument("--time-per-size", type=float, default=3.0, help="about this many seconds per size and run")
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--iters-scale", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=900, help="seconds allowed per job")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="PATH", help="also write the medians as JSON")
    opts = ap.parse_args(argv)

    if ab.backend_available("mpi"):
        print("note: no Open MPI reference (%s)" % ab.backend_available("mpi"))
    print("across-hosts allreduce benchmark: float32, in place, sum; %s" % ab.machine_line())
    runs = []
    if opts.hosts:
        sizes = [ab.parse_size(s) for s in opts.sizes.split(",")]
        backends = [b.strip() for b in opts.backends.split(",") if b.strip()]
        runs.append(("hosts", opts.hosts, None, sizes, backends, opts.link_gbit))
    else:
        for name in [s.strip() for s in opts.scenarios.split(",") if s.strip()]:
            if name not in SCENARIOS:
                ap.error("unknown scenario %r" % name)
            nhosts, slots, gbit, sizes, variants = SCENARIOS[name]
            hosts_spec = ",".join("fh%d:%d" % (h + 1, slots) for h in range(nhosts))
            backends = ["hvd"] + [v for v in variants if v != "hvd-flat" or slots > 1] + ["mpi"]
            up = ["up", str(nhosts)] + (["--rate", "%dgbit" % gbit] if gbit else [])
            runs.append((name, hosts_spec, up, [ab.parse_size(s) for s in sizes.split(",")], backends, gbit))
    if ab.backend_available("mpi"):
        runs = [(n, h, u, s, [b for b in bs if b != "mpi"], g) for n, h, u, s, bs, g in runs]

    results, targets = {}, []
    for name, hosts_spec, up, sizes, backends, gbit in runs:
        print("\n%s: %s%s" % (name, hosts_spec, ", links %g Gbit/s" % gbit if gbit else ""), flush=True)
        if up:
            fake_hosts(opts.fake_hosts, "down")
            fake_hosts(opts.fake_hosts, *up)
        try:
            medians = measure(hosts_spec, sizes, backends, opts, opts.work_dir, gbit)
        finally:
            if up:
                fake_hosts(opts.fake_hosts, "down")
        print(table(hosts_spec, sizes, medians, gbit, opts.markdown), flush=True)
        targets += target_lines(name, hosts_spec, sizes, medians, gbit)
        results[name] = {"hosts": hosts_spec, "link_gbit": gbit,
                         "median_s": {b: {str(s): t for s, t in m.items()} for b, m in medians.items()}}
    if targets:
        print("\ntargets:\n" + "\n".join("  " + t for t in targets))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": ab.machine_line(), "command": " ".join(sys.argv), "scenarios": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    if shutil.which("ssh") is None:
        sys.exit("across_hosts_benchmark.py: ssh is needed to reach the hosts")
    sys.exit(main())
