"""A plain MPI launcher, without horovodrun (the Kubeflow MPI Operator and Slurm pattern).

hvd bootstraps through MPI itself: rank 0 starts the rendezvous store and an
MPI broadcast carries its addresses and the job secret, across hosts too (real
ones: network namespaces from fake_hosts.sh, with a decoy docker0 on every
host). Without an MPI library, ranks on one host meet through a private file.
"""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from launch_harness import mpi_env

# What the ranks run (one "REPORT {json}" line each); the start-up checks only init.
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plain_mpirun_worker.py")
INIT_ONLY = "import horovod.common as hvd\nhvd.init()\n"


def _reports(stdout, size):
    reports = [json.loads(line.split("REPORT ", 1)[1]) for line in stdout.splitlines() if "REPORT " in line]
    assert len(reports) == size, stdout
    return sorted(reports, key=lambda r: r["rank"])


@pytest.mark.mpi
def test_plain_mpirun_across_two_hosts_bootstraps_through_mpi(mpi_bin, fake_hosts, request, tmp_path):
    flavour = request.node.callspec.params["mpi_bin"]
    fake_hosts(2, "--decoy")
    mpirun = os.path.join(mpi_bin, "mpirun")
    if flavour == "openmpi":
        # --map-by slot: Open MPI's default places by core and, oversubscribed,
        # stacks every rank on the first host. Its own TCP transport needs the
        # usual docker0 exclusion (it would dial the decoy bridge itself).
        argv = [mpirun, "--prefix", os.path.dirname(mpi_bin), "--allow-run-as-root", "-np", "4", "-H", "fh1:2,fh2:2",
                "--map-by", "slot", "--mca", "btl_tcp_if_exclude", "docker0,lo"]
    else:
        # This machine's own name does not resolve to its address on the hosts'
        # network, which Hydra's proxies must call back to.
        argv = [mpirun, "-localhost", "10.78.0.254", "-n", "4", "-hosts", "fh1:2,fh2:2"]
    env = mpi_env(mpi_bin, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(argv + [sys.executable, WORKER, "report"], env=env, capture_output=True, text=True,
                            timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    for report in _reports(result.stdout, 4):
        r = report["rank"]
        assert report["host"] == ("fh1" if r < 2 else "fh2"), report
        assert report["size"] == 4 and report["local"] == [r % 2, 2], report
        # The address every host reached (not the decoy bridge, nor loopback).
        assert report["store"] == "10.78.0.1", report
        assert report["sum"] == [6.0] * 3 and report["gather"] == [0, 1, 2, 3], report
        assert report["after_reinit"] == [4.0] and not report["horovod_rank_set"], report


@pytest.mark.mpi
def test_plain_mpirun_on_one_host_writes_no_exchange_file(mpi_bin, tmp_path):
    argv = [os.path.join(mpi_bin, "mpirun"), "-np", "3"]
    if "Open MPI" in subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout:
        argv.append("--oversubscribe")
    env = mpi_env(mpi_bin, TMPDIR=str(tmp_path), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(argv + [sys.executable, WORKER, "report"], env=env, capture_output=True, text=True,
                            timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    for report in _reports(result.stdout, 3):
        assert report["store"] == "127.0.0.1" and report["sum"] == [3.0] * 3 and report["after_reinit"] == [3.0]
    assert not any(name.startswith("hvd-mpirun") for name in os.listdir(tmp_path))


# Without an MPI library: processes that look as a plain mpirun leaves them
# (Open MPI's rank variables, a common parent: this test process).
def _run_as_mpirun_ranks(size, argv, tmp_path, local_size=None):
    from launch_harness import base_env
    procs = []
    for rank in range(size):
        env = base_env(PATH="/usr/bin:/bin", TMPDIR=str(tmp_path), OMPI_COMM_WORLD_RANK=str(rank),
                       OMPI_COMM_WORLD_SIZE=str(size), OMPI_COMM_WORLD_LOCAL_RANK=str(rank),
                       OMPI_COMM_WORLD_LOCAL_SIZE=str(local_size or size))
        for name in ("HVD_MPI_LIBRARY", "OPAL_PREFIX", "MPI_HOME"):
            env.pop(name, None)
        procs.append(subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return [p.communicate(timeout=120) + (p.returncode,) for p in procs]


def test_without_an_mpi_library_ranks_on_one_host_meet_through_a_private_file(tmp_path):
    results = _run_as_mpirun_ranks(2, [WORKER, "file-exchange"], tmp_path)
    for out, err, code in results:
        assert code == 0, err
    reports = _reports("".join(out for out, _, _ in results), 2)
    assert reports[0]["mode"] == 0o600
    assert all(r["sum"] == [2.0, 2.0] for r in reports)
    assert not any(name.startswith("hvd-mpirun") for name in os.listdir(tmp_path)), "left behind"


def test_without_an_mpi_library_several_hosts_are_a_clear_error(tmp_path):
    results = _run_as_mpirun_ranks(2, ["-c", INIT_ONLY], tmp_path, local_size=1)
    for out, err, code in results:
        assert code != 0 and "spans several hosts, and no MPI library was found" in err, err


def test_a_planted_exchange_file_is_refused(tmp_path):
    from horovod.common import mpirun_bootstrap
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"port": 1, "secret": "x"}))
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(ValueError, match="symbolic link"):
        mpirun_bootstrap._read_private_file(str(link))
    os.chmod(target, 0o644)
    with pytest.raises(ValueError, match="not private"):
        mpirun_bootstrap._read_private_file(str(target))
    os.chmod(target, stat.S_IRUSR | stat.S_IWUSR)
    assert mpirun_bootstrap._read_private_file(str(target)) == {"port": 1, "secret": "x"}
    # A real job: someone planted a link where this launcher's ranks meet.
    # Rank 0 does not write through it (O_EXCL, O_NOFOLLOW); rank 1 does not read it.
    planted = tmp_path / os.path.basename(mpirun_bootstrap._exchange_file(parent=os.getpid()))
    planted.symlink_to(target)
    results = _run_as_mpirun_ranks(2, ["-c", INIT_ONLY], tmp_path)
    assert results[0][2] != 0 and "something is there already" in results[0][1], results[0][1]
    assert results[1][2] != 0 and "symbolic link" in results[1][1], results[1][1]
    assert json.loads(target.read_text()) == {"port": 1, "secret": "x"}  # untouched


@pytest.mark.mpi
def test_process_sets_from_mpi4py_communicators_hold_their_world_ranks(mpi_bin):
    pytest.importorskip("mpi4py", reason="needs mpi4py (pip install mpi4py)")
    argv = [os.path.join(mpi_bin, "mpirun"), "-np", "3"]
    if "Open MPI" in subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout:
        argv.append("--oversubscribe")
    # mpi4py binds, at import, to the libmpi the loader finds: this MPI's.
    lib_dir = os.path.join(os.path.dirname(mpi_bin), "lib")
    env = mpi_env(mpi_bin, LD_LIBRARY_PATH=lib_dir, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(argv + [sys.executable, WORKER, "mpi4py-sets"], env=env, capture_output=True, text=True,
                            timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    for report in _reports(result.stdout, 3):
        assert report["halves"] == ([0, 2] if report["rank"] % 2 == 0 else [1]), report
        assert report["dup"] == [0, 1, 2], report


@pytest.mark.mpi
def test_process_sets_from_split_communicators_are_registered_on_every_rank(mpi_bin):
    # Horovod's hvd.init(comm=, process_sets=[ProcessSet(subcomm), ...]):
    # each process names its own half; every rank registers both halves.
    pytest.importorskip("mpi4py", reason="needs mpi4py (pip install mpi4py)")
    argv = [os.path.join(mpi_bin, "mpirun"), "-np", "3"]
    if "Open MPI" in subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout:
        argv.append("--oversubscribe")
    lib_dir = os.path.join(os.path.dirname(mpi_bin), "lib")
    env = mpi_env(mpi_bin, LD_LIBRARY_PATH=lib_dir, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(argv + [sys.executable, WORKER, "split-sets"], env=env, capture_output=True, text=True,
                            timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    for report in _reports(result.stdout, 3):
        even = report["rank"] % 2 == 0
        assert "entry 1 ([0, 1, 2]) repeats" in report["error"] and report["initialized"], report
        assert report["table"] == {"0": [0, 1, 2], "1": [0, 2], "2": [1], "3": [0]}, report
        assert report["ids"] == [1 if even else 2, None, 3] and report["again"] == [1 if even else 2, 3], report
        assert report["total"] == ([2.0] if even else [1.0]) and report["global_comm"], report


def test_exchange_files_of_killed_jobs_are_removed_by_the_next_job(tmp_path):
    # Rank 0 removes its file at exit - not when it is killed. The next job's
    # rank 0 removes this user's files whose launcher is gone, once they are
    # old enough not to belong to a job still starting.
    from horovod.common import mpirun_bootstrap
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "120"])
    old = time.time() - 2 * mpirun_bootstrap.STALE_EXCHANGE_FILE_SECONDS
    uid = os.getuid()
    files = {
        "dead_launcher": "hvd-mpirun-%d-%d-12345.json" % (uid, gone.pid),
        "reused_pid": "hvd-mpirun-%d-%d-1.json" % (uid, alive.pid),
        "live_launcher": os.path.basename(mpirun_bootstrap._exchange_file(parent=alive.pid)),
        "recent": "hvd-mpirun-%d-%d-12345-recent.json" % (uid, gone.pid),
        "not_ours": "hvd-mpirun-%d-%d-12345.json" % (uid + 1, gone.pid),
    }
    for key, name in files.items():
        path = tmp_path / name
        path.write_text("{}")
        os.chmod(path, 0o600)
        if key != "recent":
            os.utime(path, (old, old))
    try:
        results = _run_as_mpirun_ranks(2, [WORKER, "file-exchange"], tmp_path)
    finally:
        alive.kill()
        alive.wait()
    for out, err, code in results:
        assert code == 0, err
    left = set(os.listdir(tmp_path))
    assert files["dead_launcher"] not in left and files["reused_pid"] not in left
    assert {files["live_launcher"], files["recent"], files["not_ours"]} <= left
