"""Horovod's elastic scenarios, driven as its own integration tests drive them (the public
command line, a per-epoch host schedule, failures of workers by the rank they were started
with), with the per-epoch start ranks, sizes, hosts and rendezvous counts those tests expect."""

import json
import os
import subprocess
import sys

import pytest

from horovod.runner.elastic.constants import WORKERS_FAILED_MESSAGE

from elastic_harness import HERE, base_env

SCRIPT = os.path.join(HERE, "epoch_train.py")


def _run(tmp_path, schedule, *launcher_args, train_args=(), fixed_hosts=None):
    log, hosts_file, discovery = tmp_path / "epochs.jsonl", tmp_path / "hosts", tmp_path / "discover.sh"
    hosts_file.write_text("\n".join(schedule["0"] if schedule else []) + "\n")
    discovery.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    discovery.chmod(0o755)
    where = ["-H", fixed_hosts] if fixed_hosts else ["--host-discovery-script", discovery]
    argv = [sys.executable, "-m", "horovod.runner", *map(str, launcher_args), *map(str, where), sys.executable,
            SCRIPT, "--log", log, "--hosts-file", hosts_file, "--schedule", json.dumps(schedule or {}),
            *map(str, train_args)]
    result = subprocess.run(argv, env=base_env(), capture_output=True, text=True, timeout=180,
                            stdin=subprocess.DEVNULL, cwd=tmp_path)
    epochs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, epochs


def _rows(epochs, *keys):
    return [tuple(e[k] for k in keys) for e in epochs]


@pytest.mark.parametrize("slots", [2, 1])
def test_hosts_added_and_removed(tmp_path, slots):
    schedule = {"0": [f"localhost:{slots}"], "1": [f"localhost:{slots}", f"127.0.0.1:{slots}"],
                "2": [f"127.0.0.1:{slots}"]}
    result, epochs = _run(tmp_path, schedule, "-np", slots, "--min-np", slots, "--max-np", 2 * slots)
    assert result.returncode == 0, result.stderr
    # The workers started on 127.0.0.1 had ranks slots.. at their start; one of
    # them is rank 0 once localhost is gone, in the third round.
    assert _rows(epochs, "start_rank", "size", "hostname") == [
        (0, slots, "localhost"), (0, 2 * slots, "localhost"), (slots, slots, "127.0.0.1")], result.stderr
    assert epochs[2]["rendezvous"] == 3


@pytest.mark.parametrize("mode", ["exception", "kill"])
@pytest.mark.parametrize("fixed", [False, True])
def test_single_rank_failure(tmp_path, mode, fixed):
    hosts = ["localhost:2", "127.0.0.1:2"]
    result, epochs = _run(tmp_path, None if fixed else {"0": hosts}, "-np", 2, "--min-np", 2,
                          *([] if fixed else ["--max-np", 4]), fixed_hosts=",".join(hosts) if fixed else None,
                          train_args=["--fail-at", "1,0", "--fail-ranks", "0", "--fail-mode", mode])
    assert result.returncode == 0, result.stderr
    # Start rank 0 fails: its host is blacklisted, and rank 0 is then the
    # worker started as rank 2 on the other host.
    assert _rows(epochs, "start_rank", "size", "rendezvous") == [(0, 4, 1), (2, 2, 2), (2, 2, 2)], result.stderr


def test_every_host_losing_a_worker_ends_the_job(tmp_path):
    result, epochs = _run(tmp_path, {"0": ["localhost:2", "127.0.0.1:2"]}, "-np", 2, "--min-np", 2, "--max-np", 4,
                          train_args=["--fail-at", "1,0", "--fail-ranks", "0,2"])
    assert result.returncode != 0
    assert WORKERS_FAILED_MESSAGE in result.stderr, result.stderr
    assert _rows(epochs, "start_rank", "size") == [(0, 4)]
