# testing.py - starts real multi-process hvd jobs for test suites (hvd's own
# and downstream ones): the real rendezvous store (HMAC and all) in this
# process and one OS process per rank with the environment horovodrun would
# give it. Every framework binding's tests use this one launcher.
"""Run a snippet of Python as N real hvd ranks (for tests)."""

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

from horovod.common.rendezvous import RendezvousServer, make_secret

__all__ = ["RankResult", "rank_env", "run", "run_ok"]


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
        """The last non-empty stdout line, parsed as JSON (None when there is none)."""
        lines = [line for line in self.stdout.strip().splitlines() if line.strip()]
        return json.loads(lines[-1]) if lines else None


def rank_env(rank, size, port, secret, hosts=None, extra=None):
    """The environment horovodrun gives `rank` of `size`; `hosts[r]` names rank r's host (default: one host)."""
    hosts = hosts or ["localhost"] * size
    host = hosts[rank]
    local = [r for r in range(size) if hosts[r] == host]
    local_rank = local.index(rank)
    # cross ranks: the ranks holding the same local rank on their hosts, in rank order
    peers = [r for r in range(size) if [x for x in range(size) if hosts[x] == hosts[r]].index(r) == local_rank]
    env = dict(os.environ)
    env.update({
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(local_rank), "HOROVOD_LOCAL_SIZE": str(len(local)),
        "HOROVOD_CROSS_RANK": str(peers.index(rank)), "HOROVOD_CROSS_SIZE": str(len(peers)),
        "HOROVOD_HOSTNAME": host,
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_SECRET_KEY": secret, "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


def run(size, code, preamble="", timeout=120, hosts=None, env=None, rank_env_overrides=None,
        kill_when_done=(), cwd=None):
    """Runs `preamble` + dedented `code` as `size` ranks; returns a RankResult per rank, in rank order.

    `env` is added to every rank's environment, `rank_env_overrides[r]` to
    rank r's. Ranks in `kill_when_done` are not waited for: they are killed
    once the others exit. When `timeout` passes every rank is killed and an
    AssertionError carries all output (a hang fails, never sticks). `cwd` is
    the ranks' working directory (default: this process's).
    """
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    port = server.start()
    script = textwrap.dedent(preamble) + textwrap.dedent(code)
    procs = []
    try:
        for r in range(size):
            e = rank_env(r, size, port, secret, hosts, env)
            e.update((rank_env_overrides or {}).get(r, {}))
            procs.append(subprocess.Popen([sys.executable, "-c", script], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, cwd=cwd))
        deadline = time.monotonic() + timeout
        results = {}
        for r, p in enumerate(procs):
            if r in kill_when_done:
                continue
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outputs = ["%s\n%s" % q.communicate() for q in procs]
                raise AssertionError("ranks did not finish within %s s (hang):\n%s"
                                     % (timeout, "\n=====\n".join(outputs)))
            results[r] = RankResult(r, p.returncode, out, err)
        for r in kill_when_done:
            procs[r].kill()
            out, err = procs[r].communicate()
            results[r] = RankResult(r, procs[r].returncode, out, err)
        return [results[r] for r in range(size)]
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
