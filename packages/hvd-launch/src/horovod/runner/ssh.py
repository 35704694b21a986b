"""Starting workers on remote hosts with the OpenSSH client.

ssh always runs in batch mode (no password or host-key prompts that would
hang the launcher) with a connect timeout, so a host that is down, refuses
the connection or rejects the key is reported within seconds.  Extra client
options can be given in ``HVDRUN_SSH_OPTIONS`` (shell syntax), e.g.
``-o UserKnownHostsFile=/tmp/known_hosts``.

The remote side runs ``<python> -m horovod.runner.worker_guard`` with the
launcher's interpreter path (override with ``HVDRUN_REMOTE_PYTHON``), so
hvd-launch must be installed at the same path on every host, as with Horovod.
"""

import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from horovod.runner.errors import HostUnreachableError, LaunchError

SSH_OPTIONS_ENV = "HVDRUN_SSH_OPTIONS"
REMOTE_PYTHON_ENV = "HVDRUN_REMOTE_PYTHON"

# Variables that describe the launcher's own login session; forwarding them
# would make remote workers believe they run in it.
_NOT_FORWARDED = {"HOSTNAME", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_",
                  "TERM", "MAIL", "DISPLAY", "LS_COLORS", "TMUX", "TMUX_PANE", "STY", "WINDOW"}
_NOT_FORWARDED_PREFIXES = ("SSH_", "XDG_", "BASH_FUNC_")
_VALID_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# A host's kernel answers a TCP connection to sshd at once, however busy the
# host is; one that has not answered in this long is down or cut off, and is
# reported as such whatever --start-timeout allows for the rest of the start.
CONNECT_TIMEOUT_CAP_SECONDS = 8


def remote_env(env: Dict[str, str]) -> Dict[str, str]:
    """Returns the part of ``env`` forwarded to remote workers (the session variables stay local)."""
    return {k: v for k, v in env.items()
            if _VALID_NAME.match(k) and k not in _NOT_FORWARDED
            and not k.startswith(_NOT_FORWARDED_PREFIXES)}


def remote_python() -> str:
    """Returns the interpreter path the remote guard runs under."""
    return os.environ.get(REMOTE_PYTHON_ENV) or sys.executable


def ssh_argv(host: str, remote_command: str, port: Optional[int] = None,
             identity_file: Optional[str] = None, connect_timeout: float = 10) -> List[str]:
    """Returns the ssh client command running ``remote_command`` (a shell string) on ``host``.

    Raises:
        LaunchError: no ``ssh`` client is on PATH.
    """
    ssh = shutil.which("ssh")
    if ssh is None:
        raise LaunchError("remote hosts need the OpenSSH client, but 'ssh' is not on PATH "
                          "(Debian/Ubuntu: apt-get install openssh-client)")
    connect_seconds = max(1, int(min(connect_timeout, CONNECT_TIMEOUT_CAP_SECONDS)))
    argv = [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_seconds}",
            "-o", "StrictHostKeyChecking=no", "-o", "ServerAliveInterval=10",
            "-o", "ServerAliveCountMax=3"]
    if port is not None:
        argv += ["-p", str(port)]
    if identity_file is not None:
        argv += ["-i", identity_file]
    argv += shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))
    argv += [host, remote_command]
    return argv


def _python_command(args: Sequence[str]) -> str:
    # The guard must import before it reads the forwarded environment, so a
    # PYTHONPATH-based install has to be on the command line itself.
    parts = [remote_python()] + list(args)
    python_path = os.environ.get("PYTHONPATH")
    if python_path:
        parts = ["env", f"PYTHONPATH={python_path}"] + parts
    return "exec " + " ".join(shlex.quote(p) for p in parts)


def guard_command(signal_as_exit_code: bool = True) -> str:
    """Returns the remote shell command that starts the worker guard."""
    args = ["-u", "-m", "horovod.runner.worker_guard"]
    if signal_as_exit_code:
        args.append("--signal-as-exit-code")
    return _python_command(args)


def _check_host(host: str, port, identity_file, timeout: float) -> Optional[str]:
    probe = _python_command(["-c", "import horovod.runner.worker_guard"])
    argv = ssh_argv(host, probe, port, identity_file, connect_timeout=timeout)
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=timeout + 5, text=True)
    except subprocess.TimeoutExpired:
        return f"host {host!r} did not answer over ssh within {timeout:g}s (--start-timeout)"
    if result.returncode == 255:
        detail = result.stderr.strip().splitlines()
        detail = detail[-1] if detail else "ssh exited with status 255"
        return (f"cannot ssh to host {host!r}"
                f"{'' if port is None else f' port {port}'}: {detail}")
    if result.returncode != 0:
        return (f"host {host!r} is reachable over ssh but cannot import horovod.runner with "
                f"{remote_python()} (install hvd-launch there at the same path, or set "
                f"{REMOTE_PYTHON_ENV}): {result.stderr.strip()[-300:]}")
    return None


def check_hosts(hosts: Sequence[str], port: Optional[int], identity_file: Optional[str],
                timeout: float) -> None:
    """Checks in parallel that every host accepts ssh and has hvd-launch installed.

    Raises:
        HostUnreachableError: listing every host that failed and why.
    """
    if not hosts:
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        problems = [p for p in pool.map(lambda h: _check_host(h, port, identity_file, timeout), hosts)
                    if p]
    if problems:
        raise HostUnreachableError("; ".join(problems))
