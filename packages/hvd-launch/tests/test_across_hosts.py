"""horovodrun across several hosts: network namespaces from the workplace's fake_hosts.sh,
each with its own IP, hostname, /dev/shm and sshd, so ranks on different hosts meet only
over TCP, as on a cluster. Every collective and process sets spanning hosts, the
protected data plane (HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT), uneven
slots, the launcher's own machine with remote hosts, host files, environment
forwarding, --mpi, NIC selection, and what happens when a host is cut off or lost."""

import csv
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from launch_harness import base_env, mpi_env

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "across_hosts_worker.py")


def _run(args, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "horovod.runner", *map(str, args)], env=env or base_env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _reports(result, size):
    out = result.stdout + result.stderr
    reports = [json.loads(line.split("REPORT ", 1)[1]) for line in out.splitlines() if "REPORT {" in line]
    assert len(reports) == size, out
    return sorted(reports, key=lambda r: r["rank"])


def _placement(reports):
    return [(r["host"], r["local"], r["cross"]) for r in reports]


@pytest.mark.parametrize("hierarchical", ["0", "1"])
def test_two_hosts_of_two_ranks_run_every_collective(fake_hosts, tmp_path, hierarchical):
    # Mixed NIC names and a docker0 decoy on every host: no rank may pick the decoy.
    fake_hosts(2, "--mixed-names", "--decoy")
    timeline = tmp_path / "timeline.json"
    env = base_env(HOROVOD_HIERARCHICAL_ALLREDUCE=hierarchical, HOROVOD_HIERARCHICAL_ALLGATHER=hierarchical,
                   HOROVOD_TIMELINE=str(timeline), HVD_TEST_FORWARD_SETTING="a b'c")
    result = _run(["-np", 4, "-H", "fh1:2,fh2:2", sys.executable, WORKER], env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = _reports(result, 4)
    assert _placement(reports) == [("fh1", [0, 2], [0, 2]), ("fh1", [1, 2], [0, 2]),
                                   ("fh2", [0, 2], [1, 2]), ("fh2", [1, 2], [1, 2])]
    # The caller's environment reaches every remote rank, quoting intact.
    assert all(r["env"] == {"HVD_TEST_FORWARD_SETTING": "a b'c"} for r in reports), reports
    # Rank 0's timeline names the algorithm that ran the global allreduce.
    activities = set(re.findall(r'"name": ?"([A-Z_]+)"', timeline.read_text()))
    if hierarchical == "1":
        assert "HIERARCHICAL" in " ".join(activities), activities
    else:
        assert not any("HIERARCHICAL" in a for a in activities), activities


def _autotuned_two_host_job(fake_hosts, tmp_path, **knobs):
    """Checked training-like steps on 2 fake hosts x 2 ranks under a short
    autotune search; returns rank 0's autotune log rows and the allreduce
    and allgather activity names of its timeline."""
    fake_hosts(2)
    log = tmp_path / "autotune.csv"
    timeline = tmp_path / "timeline.json"
    env = base_env(HOROVOD_AUTOTUNE="1", HOROVOD_AUTOTUNE_LOG=str(log), HOROVOD_AUTOTUNE_WARMUP_SAMPLES="0",
                   HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE="1", HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES="2",
                   HOROVOD_TIMELINE=str(timeline), **knobs)
    result = _run(["-np", 4, "-H", "fh1:2,fh2:2", sys.executable, WORKER, "--tuning-steps", 80], env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    _reports(result, 4)
    with open(log) as f:
        rows = list(csv.DictReader(f))
    return rows, set(re.findall(r'"name": ?"([A-Z]+_ALL(?:REDUCE|GATHER))"', timeline.read_text()))


def test_autotune_across_hosts_switches_staged_and_flat_collectives_on_every_rank_alike(fake_hosts, tmp_path):
    # With hosts to stage across, autotune also tries hierarchical allreduce and
    # allgather the other way; every rank must switch at the same response, or
    # the ranks would run different algorithms and the checked steps fail or hang.
    rows, activities = _autotuned_two_host_job(fake_hosts, tmp_path)
    # Rank 0's timeline names what ran each collective: both algorithms did.
    assert {"HIERARCHICAL_ALLREDUCE", "TCP_ALLREDUCE", "HIERARCHICAL_ALLGATHER", "TCP_ALLGATHER"} <= activities, \
        activities
    staging = [(row["hierarchical_allreduce"], row["hierarchical_allgather"]) for row in rows]
    # Two settings of fusion threshold and cycle time and the cache the other
    # way, all staged as the job started; then hierarchical allreduce flipped
    # around the best, then hierarchical allgather; then two smaller chunks of
    # the hosts' shared-memory stage (rows like the best's so far); then the best.
    assert len(rows) == 8, rows
    assert staging[:4] == [("1", "1")] * 3 + [("0", "1")], rows
    assert staging[4][1] == "0", rows
    assert staging[7] in staging[:7] and float(rows[7]["score"]) == max(float(r["score"]) for r in rows[:7]), rows


def test_autotune_across_hosts_keeps_a_hierarchical_mode_the_user_set(fake_hosts, tmp_path):
    rows, activities = _autotuned_two_host_job(fake_hosts, tmp_path, HOROVOD_HIERARCHICAL_ALLREDUCE="1")
    # Two joint settings, the cache, only hierarchical allgather flipped, two
    # pipeline chunks, the best.
    assert len(rows) == 7, rows
    assert [row["hierarchical_allreduce"] for row in rows] == ["1"] * 7, rows
    assert rows[3]["hierarchical_allgather"] == "0", rows
    # Every allreduce of the global set ran staged: none went flat.
    assert "HIERARCHICAL_ALLREDUCE" in activities and "TCP_ALLREDUCE" not in activities, activities


def test_protected_data_plane_across_hosts_gives_the_results_of_an_unprotected_one(fake_hosts):
    # One rank a host: every byte between the ranks crosses the hosts' link.
    fake_hosts(2)
    digests = {}
    for knobs in ({}, {"HOROVOD_DATA_AUTH": "1"}, {"HOROVOD_DATA_ENCRYPT": "1"}):
        result = _run(["-np", 2, "-H", "fh1:1,fh2:1", sys.executable, WORKER, "--digest"], env=base_env(**knobs))
        assert result.returncode == 0, (knobs, result.stdout + result.stderr)
        reports = _reports(result, 2)
        assert [r["host"] for r in reports] == ["fh1", "fh2"], reports
        assert all(r["data_knobs"] == knobs for r in reports), reports  # the remote rank has them too
        # (the ranks' alltoall results differ: each rank's digest is compared)
        digests[" ".join(knobs) or "unprotected"] = tuple(r["digest"] for r in reports)
    assert len(set(digests.values())) == 1, digests


def test_three_hosts_with_uneven_slots_from_a_hostfile(fake_hosts, tmp_path):
    fake_hosts(3)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# one host with two slots, two with one\nfh1 slots=2\nfh2 slots=1\nfh3 slots=1\n")
    result = _run(["-np", 4, "--hostfile", hostfile, sys.executable, WORKER])
    assert result.returncode == 0, result.stdout + result.stderr
    reports = _reports(result, 4)
    assert [r["host"] for r in reports] == ["fh1", "fh1", "fh2", "fh3"]
    # The same-host fast lane serves a set whose ranks share a host, never one
    # that spans hosts (its lane would be shared memory the hosts do not share).
    assert all(r["lane_calls"]["global"] == 0 for r in reports), reports
    assert all(r["lane_calls"]["first_host"] > 0 for r in reports[:2]), reports


def test_the_launchers_machine_runs_a_rank_beside_remote_hosts(fake_hosts):
    fake_hosts(2)
    result = _run(["-np", 3, "-H", "localhost:1,fh1:1,fh2:1", sys.executable, WORKER])
    assert result.returncode == 0, result.stdout + result.stderr
    hosts = [r["host"] for r in _reports(result, 3)]
    assert hosts[1:] == ["fh1", "fh2"] and hosts[0] not in ("fh1", "fh2"), hosts


@pytest.mark.mpi
def test_horovodrun_mpi_across_hosts_runs_every_collective(mpi_bin, fake_hosts, request):
    fake_hosts(2)
    env = mpi_env(mpi_bin, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                  HVD_TEST_FORWARD_SETTING="over mpi")
    result = _run(["--mpi", "-np", 4, "-H", "fh1:2,fh2:2", sys.executable, WORKER], env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = _reports(result, 4)
    assert [r["host"] for r in reports] == ["fh1", "fh1", "fh2", "fh2"]
    assert all(r["env"] == {"HVD_TEST_FORWARD_SETTING": "over mpi"} for r in reports), reports


def test_network_interfaces_name_the_workers_nics(fake_hosts):
    # A second network between the hosts only (the launcher's machine is not on it),
    # its NIC named eth1 on fh1 and ens6 on fh2: the data goes over it, the
    # launcher's connections stay on the network it can reach.
    fake_hosts(2, "--second-net", "--mixed-names")
    result = _run(["-np", 2, "-H", "fh1:1,fh2:1", "--network-interface", "eth1,ens6",
                   sys.executable, WORKER, "--mb", 32])
    assert result.returncode == 0, result.stdout + result.stderr
    for report, data_nic, control_nic in zip(_reports(result, 2), ("eth1", "ens6"), ("eth0", "ens5")):
        sent = report["tx_bytes"]
        # A 2-rank ring allreduce sends the whole buffer (half in each phase).
        assert sent[data_nic] >= 30 << 20 and sent[control_nic] < 4 << 20, report


def test_hosts_that_cannot_reach_each_other_fail_fast_naming_both(fake_hosts):
    fake_hosts(2, "--second-net")
    # fh2's NIC on the data network is down: fh1 and fh2 cannot meet over it.
    fake_hosts.exec("fh2", "ip", "link", "set", "eth1", "down")
    started = time.monotonic()
    result = _run(["-np", 2, "-H", "fh1:1,fh2:1", "--network-interface", "eth1", sys.executable, WORKER],
                  timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode != 0 and elapsed < 15, (elapsed, result.stderr)
    assert "fh1" in result.stderr and "fh2" in result.stderr and "eth1" in result.stderr, result.stderr


def test_unreachable_host_at_start_is_reported_within_seconds(fake_hosts):
    fake_hosts(2)
    fake_hosts.run("cut", "fh2")
    started = time.monotonic()
    result = _run(["-np", 2, "-H", "fh1:1,fh2:1", sys.executable, WORKER], timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode != 0 and elapsed < 12, (elapsed, result.stderr)
    assert "fh2" in result.stderr, result.stderr


class _Job:
    """horovodrun running the worker's --hold loop, its output collected as it comes."""

    def __init__(self, args, raised_dir):
        self.lines = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "horovod.runner", *map(str, args), sys.executable, WORKER,
             "--hold-seconds", "120", "--raised-dir", str(raised_dir)],
            env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def output(self):
        return "".join(self.lines)

    def wait_for_steps(self, count, timeout=90):
        deadline = time.monotonic() + timeout
        while sum("STEP " in line for line in self.lines) < count:
            assert time.monotonic() < deadline and self.process.poll() is None, self.output()
            time.sleep(0.1)


@pytest.mark.parametrize("fault", ["cut", "crash"])
def test_host_lost_mid_job_ends_the_job_in_seconds_naming_it(fake_hosts, tmp_path, fault):
    fake_hosts(2)
    job = _Job(["-np", 4, "-H", "fh1:2,fh2:2"], tmp_path)
    try:
        job.wait_for_steps(20)
        cut_at = time.time()
        fake_hosts.run(fault, "fh2")
        job.process.wait(timeout=60)
        ended = time.time() - cut_at
    finally:
        if job.process.poll() is None:
            job.process.kill()
    out = job.output()
    assert job.process.returncode != 0
    assert ended < 15, (ended, out)
    # The cause is the lost host, not the reachable ranks that reacted to it.
    assert re.search(r"fh2", out.split("STEP")[-1]), out
    peer_timeout = 5.0  # HOROVOD_PEER_TIMEOUT_SECONDS' default
    for rank in (0, 1):  # on fh1, which stays reachable
        raised = json.loads((tmp_path / f"raised.{rank}.json").read_text())
        assert raised["time"] - cut_at < peer_timeout + 2, raised
        assert "fh2" in raised["error"], raised
    if fault == "cut":
        # The ranks cut off on fh2 end on their own, within the same bound.
        for rank in (2, 3):
            path = tmp_path / f"raised.{rank}.json"
            deadline = time.monotonic() + 20
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            raised = json.loads(path.read_text())
            assert raised["time"] - cut_at < 15, raised
        fake_hosts.run("heal", "fh2")
        assert _processes_in(fake_hosts, "fh2", ("horovod", "across_hosts_worker")) == []


def _processes_in(fake_hosts, host, words):
    """(pid, command line) of the processes running in `host` whose command line has one of `words`.
    A fake host shares this machine's process table: its own are those in its network namespace."""
    namespace = fake_hosts.exec(host, "readlink", "/proc/self/ns/net").stdout.strip()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != namespace:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(word in command for word in words):
            found.append((int(pid), command))
    return found
