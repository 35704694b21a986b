"""Local jobs: the worker environment, output prefixing and --output-filename, with real processes."""

import json
import os
import re
import sys

import pytest

from launch_harness import base_env, horovodrun

PRINT_ENV = (
    "import json, os; "
    "print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('HOROVOD_', 'PYTHONUNBUFFERED', 'CALLER_'))} | {'cwd': os.getcwd()}))"
)


def _worker_envs(stdout):
    envs = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(\d+)\]<stdout>:(.*)$", line)
        assert match, f"unprefixed line {line!r}"
        env = json.loads(match.group(2))
        envs[int(match.group(1))] = env
    return envs


@pytest.mark.parametrize("num_proc", [1, 2, 3, 4])
def test_local_ranks_get_the_worker_environment(num_proc, tmp_path):
    result = horovodrun("-np", num_proc, sys.executable, "-c", PRINT_ENV, cwd=tmp_path,
                        env=base_env(CALLER_SETTING="kept"))
    assert result.returncode == 0, result.stderr
    envs = _worker_envs(result.stdout)
    assert sorted(envs) == list(range(num_proc))
    secrets = {env["HOROVOD_SECRET_KEY"] for env in envs.values()}
    ports = {env["HOROVOD_GLOO_RENDEZVOUS_PORT"] for env in envs.values()}
    assert len(secrets) == 1 and re.fullmatch(r"[0-9a-f]{32,}", secrets.pop())
    assert len(ports) == 1
    for rank, env in envs.items():
        assert env["HOROVOD_RANK"] == str(rank)
        assert env["HOROVOD_SIZE"] == str(num_proc)
        assert env["HOROVOD_LOCAL_RANK"] == str(rank)
        assert env["HOROVOD_LOCAL_SIZE"] == str(num_proc)
        assert env["HOROVOD_CROSS_RANK"] == "0"
        assert env["HOROVOD_CROSS_SIZE"] == "1"
        assert env["HOROVOD_HOSTNAME"] == "localhost"
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert env["HOROVOD_CONTROLLER"] == "gloo"
        assert env["HOROVOD_CPU_OPERATIONS"] == "gloo"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["CALLER_SETTING"] == "kept"
        assert env["cwd"] == str(tmp_path)


def test_each_job_gets_a_new_secret():
    first = _worker_envs(horovodrun("-np", 1, sys.executable, "-c", PRINT_ENV).stdout)[0]
    second = _worker_envs(horovodrun("-np", 1, sys.executable, "-c", PRINT_ENV).stdout)[0]
    assert first["HOROVOD_SECRET_KEY"] != second["HOROVOD_SECRET_KEY"]


def test_tuning_flags_and_interfaces_reach_the_workers():
    result = horovodrun("-np", 2, "--fusion-threshold-mb", "2", "--cycle-time-ms", "5",
                        "--timeline-filename", "/tmp/tl.json", "--gloo-timeout-seconds", "9",
                        "--log-level", "debug", "--network-interfaces", "lo",
                        sys.executable, "-c", PRINT_ENV)
    assert result.returncode == 0, result.stderr
    for env in _worker_envs(result.stdout).values():
        assert env["HOROVOD_FUSION_THRESHOLD"] == str(2 * 1024 * 1024)
        assert env["HOROVOD_CYCLE_TIME"] == "5.0"
        assert env["HOROVOD_TIMELINE"] == "/tmp/tl.json"
        assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "9"
        assert env["HOROVOD_LOG_LEVEL"] == "DEBUG"
        assert env["HOROVOD_GLOO_IFACE"] == "lo"


def test_config_file_knobs_reach_the_workers(tmp_path):
    config = tmp_path / "hvd.yaml"
    config.write_text("params:\n  cache_capacity: 77\nstall_check:\n  enabled: false\n")
    result = horovodrun("-np", 1, "--config-file", config, sys.executable, "-c", PRINT_ENV)
    assert result.returncode == 0, result.stderr
    env = _worker_envs(result.stdout)[0]
    assert env["HOROVOD_CACHE_CAPACITY"] == "77"
    assert env["HOROVOD_STALL_CHECK_DISABLE"] == "1"


WRITE_BOTH = ("import os, sys; r = os.environ['HOROVOD_RANK']; "
              "print('out', r); print('err', r, file=sys.stderr); "
              "sys.stdout.write('partial ' + r)")


def test_output_lines_are_prefixed_with_rank_and_stream():
    result = horovodrun("-np", 2, sys.executable, "-c", WRITE_BOTH)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "[0]<stdout>:out 0", "[0]<stdout>:partial 0", "[1]<stdout>:out 1", "[1]<stdout>:partial 1"]
    assert "[0]<stderr>:err 0" in result.stderr.splitlines()
    assert "[1]<stderr>:err 1" in result.stderr.splitlines()


def test_timestamp_prefix_precedes_each_rank_line():
    result = horovodrun("-np", 1, "--prefix-output-with-timestamp", sys.executable, "-c", "print('hi')")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} \[0\]<stdout>:hi\n", result.stdout)


def test_output_filename_writes_each_rank_stream(tmp_path):
    out = tmp_path / "logs"
    result = horovodrun("-np", 2, "--output-filename", out, sys.executable, "-c", WRITE_BOTH)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (out / f"rank.{rank}" / "stdout").read_text() == f"out {rank}\npartial {rank}\n"
        assert (out / f"rank.{rank}" / "stderr").read_text() == f"err {rank}\n"
    # The terminal still shows the output.
    assert "[1]<stdout>:out 1" in result.stdout


def test_hvdrun_and_horovodrun_scripts_are_installed():
    scripts = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(scripts, "horovodrun")):
        pytest.skip("hvd-launch is not pip-installed in this interpreter (running from the source tree)")
    import subprocess
    for name in ("horovodrun", "hvdrun"):
        result = subprocess.run([os.path.join(scripts, name), "-np", "1", "echo", "ok"],
                                capture_output=True, text=True, env=base_env(), timeout=60)
        assert result.stdout == "[0]<stdout>:ok\n", result.stderr


def test_version_flag_prints_only_the_version():
    result = horovodrun("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"\d+\.\d+\.\d+.*\n", result.stdout)


def test_help_is_a_manual():
    result = horovodrun("--help")
    assert result.returncode == 0
    for text in ("-np N", "--hostfile", "--mpi", "--output-filename", "--fusion-threshold-mb",
                 "HOROVOD_FUSION_THRESHOLD", "--min-np", "Examples:"):
        assert text in result.stdout


def test_an_interface_list_is_passed_on_for_each_host_to_choose_from():
    # Hosts may name their NICs differently: each rank takes the first listed
    # name its own host has (here lo), so the list travels whole.
    result = horovodrun("-np", 2, "--network-interfaces", "nosuchif0,lo", sys.executable, "-c",
                        "import horovod.common as hvd; hvd.init(); " + PRINT_ENV)
    assert result.returncode == 0, result.stderr
    assert {env["HOROVOD_GLOO_IFACE"] for env in _worker_envs(result.stdout).values()} == {"nosuchif0,lo"}
