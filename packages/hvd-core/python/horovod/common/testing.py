# testing.py - starts real multi-process hvd jobs for test suites (hvd's own
# and downstream ones): the real rendezvous store (HMAC and all) in this
# process and one OS process per rank with the environment horovodrun would
# give it. Every framework binding's tests use this one launcher. Ranks
# run a function of a real module (run_program), so a failure's traceback
# names its file and line; report() is how a rank hands its result back.
# horovodrun() runs the launcher itself, for every package's command-line tests.
"""Run N real hvd ranks (or horovodrun) for tests."""

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass

from horovod.common.rendezvous import RendezvousServer, make_secret

__all__ = ["RankResult", "horovodrun", "program_argv", "rank_env", "report", "run", "run_ok", "run_program",
           "run_program_ok"]


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


def report(value):
    """Writes `value` as one JSON line on stdout: what run_ok() hands back for this rank.

    A rank calls it last (run_program() calls it with the rank function's
    return value); earlier lines are ignored by RankResult.last_json(). The
    line goes out in a single write(2) after whatever print() buffered, so
    ranks that share one pipe (as under a plain mpirun) do not interleave
    their reports.
    """
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps(value) + "\n").encode())


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
        kill_when_done=(), cwd=None, store_hook=None):
    """Runs `preamble` + dedented `code` as `size` ranks; returns a RankResult per rank, in rank order.

    `env` is added to every rank's environment, `rank_env_overrides[r]` to
    rank r's. Ranks in `kill_when_done` are not waited for: they are killed
    once the others exit. When `timeout` passes every rank is killed and an
    AssertionError carries all output (a hang fails, never sticks). `cwd` is
    the ranks' working directory (default: this process's). `store_hook`, when
    given, is called with the job's RendezvousServer before any rank starts
    (a test may watch the keys the ranks set, see RendezvousServer.watch).
    """
    secret = make_secret()
    server = RendezvousServer(secret, host="127.0.0.1")
    port = server.start()
    script = textwrap.dedent(preamble) + textwrap.dedent(code)
    procs = []
    try:
        if store_hook is not None:
            store_hook(server)
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


def _program_script(target, path, kwargs):
    # The -c script each rank runs: a few lines that import the real module,
    # so tracebacks point into it rather than at <string>.
    return ("import sys\nsys.path.insert(0, %r)\nfrom horovod.common import testing\n"
            "testing._run_rank_function(%r, %r)\n" % (path or os.getcwd(), target, json.dumps(kwargs or {})))


def _run_rank_function(target, kwargs_json):
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(**json.loads(kwargs_json))
    if result is not None:
        report(result)


def program_argv(target, path=None, kwargs=None):
    """The command line that runs the function `target` (as run_program() does) in one plain process.

    For tests of a process outside any job (no rank environment, no store).
    """
    return [sys.executable, "-c", _program_script(target, path, kwargs)]


def run_program(size, target, path=None, kwargs=None, **run_kwargs):
    """Runs the function `target` ("package.module:function") as `size` ranks; like run().

    The module is imported from `path` (default: this process's working directory), the
    function is called with `kwargs` (JSON-serialisable) and, when it returns
    something other than None, its value is report()ed. Other arguments are
    run()'s (timeout, hosts, env, rank_env_overrides, kill_when_done, cwd, store_hook).
    """
    return run(size, _program_script(target, path, kwargs), **run_kwargs)


def run_program_ok(size, target, path=None, kwargs=None, **run_kwargs):
    """Like run_program(), but asserts every rank exited 0; returns what each rank reported, in rank order."""
    return run_ok(size, _program_script(target, path, kwargs), **run_kwargs)


def wait_for_file(path, wait_limit=30.0):
    """Waits until `path` exists, however slowly a loaded machine runs the
    rank that makes it: a handshake between ranks outside hvd. Returns
    whether it appeared within `wait_limit` seconds."""
    deadline = time.monotonic() + wait_limit
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def interrupt_first_rank(call, rank, marker_dir, delay=0.5, wait_limit=30.0):
    """Ctrl-C in a collective, seen from inside a rank program: rank 0 makes
    `call` and gets SIGINT `delay` seconds in (Python's KeyboardInterrupt
    handler installed, as a terminal has it; a rank started from a
    background job inherits SIGINT ignored); every other rank makes `call`
    only once rank 0 has been interrupted (a file in `marker_dir` says so),
    however slowly a loaded machine runs the ranks. Returns, on rank 0, the
    seconds from the signal to the KeyboardInterrupt, or None when `call`
    returned first; None on the other ranks."""
    marker = os.path.join(marker_dir, "interrupted")
    if rank != 0:
        wait_for_file(marker, wait_limit)
        call()
        return None
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sent = []

    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Timer(delay, interrupt).start()
    try:
        call()
        waited = None
    except KeyboardInterrupt:
        waited = time.monotonic() - sent[0]
    open(marker, "w").close()
    return waited


def horovodrun(*args, env=None, timeout=120, cwd=None, **subprocess_kwargs):
    """Runs `horovodrun ARGS...` to completion; returns its subprocess.CompletedProcess (text output).

    The launcher runs as `python -m horovod.runner` under this interpreter, so
    it is the test environment's hvd-launch. `env` is the launcher's whole
    environment; by default this process's, without the HOROVOD_* and
    HVDRUN_* variables of any enclosing job. stdin is closed. A run that
    outlives `timeout` seconds is killed and fails the test with everything
    it printed, rather than hanging the suite.
    """
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_"))}
        env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "horovod.runner"] + [str(a) for a in args]
    subprocess_kwargs.setdefault("stdin", subprocess.DEVNULL)
    try:
        return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              **subprocess_kwargs)
    except subprocess.TimeoutExpired as e:
        def text(output):
            return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")
        raise AssertionError("horovodrun %s did not finish within %s s\n--- stdout\n%s\n--- stderr\n%s"
                             % (" ".join(command[3:]), timeout, text(e.stdout), text(e.stderr))) from None
