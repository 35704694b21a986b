# optimizer_ranks.py - runs a snippet of Python as N real hvd ranks for the
# optimizer/functions/convergence/SyncBatchNorm tests: the real rendezvous
# store (HMAC and all) in this process, one OS process per rank with the
# environment horovodrun would give it. Each snippet prints one JSON line
# last; run_ok() returns those, one per rank.
"""Helpers to run torch snippets as N real hvd ranks."""

import json
import os
import subprocess
import sys
import textwrap
import time

from horovod.common.rendezvous import RendezvousServer, make_secret

PREAMBLE = """
import json, os, sys
import torch
import horovod.torch as hvd
torch.set_num_threads(1)
hvd.init()
"""


def _env(rank, size, port, secret, extra=None):
    env = dict(os.environ)
    env.update({
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(rank), "HOROVOD_LOCAL_SIZE": str(size),
        "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
        "HOROVOD_HOSTNAME": "localhost",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_SECRET_KEY": secret, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
    })
    env.update(extra or {})
    return env


def run(size, code, timeout=120, env=None):
    """Runs `code` (dedented, after PREAMBLE) as `size` ranks; returns [(rc, stdout, stderr)]."""
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    port = server.start()
    script = PREAMBLE + textwrap.dedent(code)
    procs = []
    try:
        for r in range(size):
            procs.append(subprocess.Popen([sys.executable, "-c", script], env=_env(r, size, port, secret, env),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + timeout
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outs = ["%s\n%s" % q.communicate() for q in procs]
                raise AssertionError("ranks did not finish within %s s:\n%s" % (timeout, "\n=====\n".join(outs)))
            results.append((p.returncode, out, err))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


def run_ok(size, code, timeout=120, env=None):
    """Like run(), but asserts every rank exited 0; returns each rank's last stdout line, parsed as JSON."""
    out = []
    for r, (rc, stdout, stderr) in enumerate(run(size, code, timeout, env)):
        assert rc == 0, "rank %d exited %d\n--- stdout\n%s\n--- stderr\n%s" % (r, rc, stdout, stderr)
        lines = [line for line in stdout.strip().splitlines() if line.strip()]
        out.append(json.loads(lines[-1]) if lines else None)
    return out
