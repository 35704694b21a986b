"""Helpers for hvd-launch tests: running horovodrun, clean environments, process checks.

Works with hvd-launch and hvd-core installed and, for development, straight
from the source tree: the package folders are then put on sys.path and on the
PYTHONPATH of every launched process.  (A uniquely named module rather than
conftest.py, so other packages' test helpers can never shadow it.)
"""

import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_SRC = os.path.join(os.path.dirname(HERE), "src")
CORE_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "hvd-core", "python")


def _source_tree_paths():
    """Folders to put on PYTHONPATH when the packages are not installed."""
    paths = []
    probe = subprocess.run([sys.executable, "-c", "import horovod.runner.worker_guard"],
                           capture_output=True, env={k: v for k, v in os.environ.items()
                                                     if k != "PYTHONPATH"})
    if probe.returncode != 0:
        paths.append(PACKAGE_SRC)
    probe = subprocess.run([sys.executable, "-c", "import horovod.common.rendezvous"],
                           capture_output=True, env={k: v for k, v in os.environ.items()
                                                     if k != "PYTHONPATH"})
    if probe.returncode != 0 and os.path.isdir(CORE_PYTHON):
        paths.append(CORE_PYTHON)
    return paths


_EXTRA_PATHS = _source_tree_paths()
for _path in reversed(_EXTRA_PATHS):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from horovod.common import testing  # noqa: E402 (needs the paths above when not installed)


def base_env(**overrides):
    """Returns an environment for launcher subprocesses that can import the packages."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("HVDRUN_", "HOROVOD_")):
            del env[name]
    if _EXTRA_PATHS:
        inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(_EXTRA_PATHS + inherited)
    # Short grace period keeps the failure tests quick.
    env["HVDRUN_KILL_GRACE_SECONDS"] = "2"
    env.update(overrides)
    return env


def horovodrun(*args, env=None, timeout=60, cwd=None, **popen_kwargs):
    """Runs ``python -m horovod.runner ARGS`` (horovod.common.testing.horovodrun) in
    ``base_env()`` unless ``env`` is given; returns the CompletedProcess (text output)."""
    return testing.horovodrun(*args, env=env or base_env(), timeout=timeout, cwd=cwd, **popen_kwargs)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    """A running sshd on 127.0.0.1 and 127.0.0.2 that accepts ``identity_file`` for root."""

    def __init__(self, port, identity_file, wrong_identity_file, known_hosts):
        self.port = port
        self.identity_file = identity_file
        self.wrong_identity_file = wrong_identity_file
        self.ssh_options = f"-o UserKnownHostsFile={known_hosts} -o LogLevel=ERROR"

    def env(self, **overrides):
        return base_env(HVDRUN_SSH_OPTIONS=self.ssh_options, **overrides)


def mpirun_flavour(bin_dir):
    mpirun = os.path.join(bin_dir, "mpirun") if bin_dir else shutil.which("mpirun")
    if not mpirun or not os.path.exists(mpirun):
        return None
    try:
        text = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "Open MPI" in text:
        return "openmpi"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    return None


def mpi_env(bin_dir, **overrides):
    env = base_env(**overrides)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env
