# ranks.py - starts real multi-process hvd jobs for the tests: an in-process
# rendezvous store (the real one, HMAC and all) and one OS process per rank
# with the environment horovodrun would give it.
"""Helpers to run a snippet of Python as N real hvd ranks."""

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

from horovod.common.rendezvous import RendezvousServer, make_secret

PREAMBLE = """
import json, os, sys, time
import numpy as np
import horovod.common as hvd
"""


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    def __str__(self):
        return "rank %d exited %d\n--- stdout\n%s\n--- stderr\n%s" % (
            self.rank, self.returncode, self.stdout, self.stderr)


def rank_env(rank, size, port, secret, hosts=None, extra=None):
    hosts = hosts or ["localhost"] * size
    host = hosts[rank]
    local = [r for r in range(size) if hosts[r] == host]
    order = []
    for h in hosts:
        if h not in order:
            order.append(h)
    local_rank = local.index(rank)
    same_local = [r for r in range(size) if [x for x in range(size) if hosts[x] == hosts[r]].index(r) == local_rank]
    env = dict(os.environ)
    env.update({
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(local_rank), "HOROVOD_LOCAL_SIZE": str(len(local)),
        "HOROVOD_CROSS_RANK": str(same_local.index(rank)), "HOROVOD_CROSS_SIZE": str(len(same_local)),
        "HOROVOD_HOSTNAME": host,
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_SECRET_KEY": secret, "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


def run(size, code, timeout=60, hosts=None, env=None, rank_env_overrides=None, kill_when_done=()):
    """Runs `code` (dedented, after PREAMBLE) as `size` ranks; returns RankResults.

    Every rank is killed when `timeout` passes; the test then fails with all output.
    """
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    port = server.start()
    script = PREAMBLE + textwrap.dedent(code)
    procs = []
    try:
        for r in range(size):
            e = rank_env(r, size, port, secret, hosts, env)
            e.update((rank_env_overrides or {}).get(r, {}))
            procs.append(subprocess.Popen([sys.executable, "-c", script], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + timeout
        results = []
        for r, p in enumerate(procs):
            if r in kill_when_done:
                continue
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outs = []
                for q in procs:
                    o, e2 = q.communicate()
                    outs.append("%s\n%s" % (o, e2))
                raise AssertionError("ranks did not finish within %s s (hang):\n%s" % (timeout, "\n=====\n".join(outs)))
            results.append(RankResult(r, p.returncode, out, err))
        for r in kill_when_done:
            procs[r].kill()
            out, err = procs[r].communicate()
            results.insert(r, RankResult(r, procs[r].returncode, out, err))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


def run_ok(size, code, **kwargs):
    """Like run(), but asserts every rank exited 0; returns the parsed last stdout line of each (JSON)."""
    import json
    results = run(size, code, **kwargs)
    for res in results:
        assert res.returncode == 0, str(res)
    out = []
    for res in results:
        lines = [l for l in res.stdout.strip().splitlines() if l.strip()]
        out.append(json.loads(lines[-1]) if lines else None)
    return out
