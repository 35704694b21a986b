# torch_ranks.py - runs a snippet of Python as N real hvd ranks for the
# collective, error and torch.compile tests: hvd-core's real rendezvous store
# (HMAC and all) in this process and one OS process per rank with the
# environment horovodrun would give it (Gloo-style HOROVOD_* variables).
"""Helpers to run torch snippets as N real hvd ranks."""

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

from horovod.common.rendezvous import RendezvousServer, make_secret

PREAMBLE = """
import json, os, sys, time
import torch
import horovod.torch as hvd
# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)
"""


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    def __str__(self):
        return "rank %d exited %d\n--- stdout\n%s\n--- stderr\n%s" % (self.rank, self.returncode, self.stdout,
                                                                     self.stderr)

    def last_json(self):
        lines = [line for line in self.stdout.strip().splitlines() if line.strip()]
        return json.loads(lines[-1]) if lines else None


def rank_env(rank, size, port, secret, extra=None):
    """The environment horovodrun gives `rank` of `size` on one host."""
    env = dict(os.environ)
    env.update({
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(rank), "HOROVOD_LOCAL_SIZE": str(size),
        "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1", "HOROVOD_HOSTNAME": "localhost",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_SECRET_KEY": secret, "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


def run(size, code, timeout=120, env=None):
    """Runs `code` (dedented, after PREAMBLE) as `size` ranks; returns a RankResult per rank.

    When `timeout` passes every rank is killed and the test fails with all
    output (a hang is a failure, never a stuck test run).
    """
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    port = server.start()
    script = PREAMBLE + textwrap.dedent(code)
    procs = []
    try:
        for r in range(size):
            procs.append(subprocess.Popen([sys.executable, "-c", script], env=rank_env(r, size, port, secret, env),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + timeout
        results = []
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outputs = ["%s\n%s" % q.communicate() for q in procs]
                raise AssertionError("ranks did not finish within %s s (hang):\n%s"
                                     % (timeout, "\n=====\n".join(outputs)))
            results.append(RankResult(r, p.returncode, out, err))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


def run_ok(size, code, **kwargs):
    """Like run(), but asserts every rank exited 0; returns each rank's last stdout line, parsed as JSON."""
    results = run(size, code, **kwargs)
    for res in results:
        assert res.returncode == 0, str(res)
    return [res.last_json() for res in results]
