"""Turns launch settings into a running job: rendezvous store, worker environments, processes.

Shared by ``horovodrun`` and ``horovod.run()``.  Everything that can be
checked before a process starts (hosts, slots, interfaces, ssh reachability,
mpirun) is checked first, so bad input fails within seconds and starts
nothing.
"""

import dataclasses
import os
import re
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from horovod.runner import mpi as mpi_launch
from horovod.runner import ssh
from horovod.runner.errors import BadInputError, LaunchError
from horovod.runner.hosts import HostSlots, SlotInfo, assign_slots, is_local_host, local_host_names
from horovod.runner.job import JobResult, WorkerCommand, WorkerExit, run_job
from horovod.runner.network import parse_interfaces, rendezvous_address
from horovod.runner.tuning_flags import tuning_env

DEFAULT_START_TIMEOUT = 30.0


@dataclasses.dataclass
class LaunchSettings:
    """Everything a static (non-elastic) job needs; mirrors horovodrun's flags."""

    command: List[str]
    num_proc: int
    hosts: List[HostSlots]
    ssh_port: Optional[int] = None
    ssh_identity_file: Optional[str] = None
    use_mpi: bool = False
    mpi_args: Optional[str] = None
    tcp_only: bool = False
    binding_args: Optional[str] = None
    network_interfaces: Optional[str] = None
    output_filename: Optional[str] = None
    prefix_timestamp: bool = False
    verbose: bool = False
    start_timeout: float = DEFAULT_START_TIMEOUT
    tuning: Dict[str, object] = dataclasses.field(default_factory=dict)
    # Variables added to every worker's environment (horovod.run() uses it).
    extra_env: Dict[str, str] = dataclasses.field(default_factory=dict)


def start_rendezvous(bind_host: str):
    try:
        from horovod.common.rendezvous import RendezvousServer, make_secret
    except ImportError as e:
        raise LaunchError(f"horovodrun needs hvd-core's rendezvous store (pip install hvd-core): {e}") \
            from None
    secret = make_secret()
    server = RendezvousServer(secret, host=bind_host, port=0)
    try:
        port = server.start()
    except OSError as e:
        raise LaunchError(f"cannot start the rendezvous store on {bind_host}: {e.strerror}") from None
    return server, secret, port


def base_worker_env(settings: LaunchSettings, rendezvous_addr: str, rendezvous_port: int,
                    secret: str, gloo: bool = True, interface: Optional[str] = None) -> Dict[str, str]:
    """Returns the environment every worker shares: the caller's plus the job's HOROVOD_* variables."""
    env = dict(os.environ)
    env.update(tuning_env(settings.tuning))
    env.update({
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous_port),
        "HOROVOD_SECRET_KEY": secret,
        "PYTHONUNBUFFERED": "1",
    })
    if gloo:
        env["HOROVOD_CONTROLLER"] = "gloo"
        env["HOROVOD_CPU_OPERATIONS"] = "gloo"
    if interface:
        # Otherwise the caller's own HOROVOD_GLOO_IFACE is forwarded unchanged.
        env["HOROVOD_GLOO_IFACE"] = interface
    env.update(settings.extra_env)
    return env


def _log(settings: LaunchSettings, message: str) -> None:
    if settings.verbose:
        sys.stderr.write(f"horovodrun: {message}\n")
        sys.stderr.flush()


def output_dir(settings: LaunchSettings, rank: int) -> Optional[str]:
    if not settings.output_filename:
        return None
    return os.path.join(os.path.abspath(settings.output_filename), f"rank.{rank}")


def plan(settings: LaunchSettings) -> List[SlotInfo]:
    """Returns the rank placement for ``settings`` (raises BadInputError when it cannot fit)."""
    return assign_slots(settings.hosts, settings.num_proc)


def launch(settings: LaunchSettings,
           on_failure: Optional[Callable[[WorkerExit], None]] = None,
           on_started: Optional[Callable[[object, str, int, str], None]] = None,
           on_finished: Optional[Callable[[object, str, int, str], None]] = None) -> JobResult:
    """Runs the job described by ``settings`` and returns how it ended.

    Args:
        settings: the job.
        on_failure: called with the first failing worker before the others are stopped.
        on_started: called as ``on_started(server, addr, port, secret)`` once the
            rendezvous store runs and before any worker starts (horovod.run()
            stores the function there).
        on_finished: called the same way after the workers ended, before the
            store stops (horovod.run() collects the results there).

    Raises:
        BadInputError: the host plan or an option is invalid.
        HostUnreachableError: a remote host failed the ssh check.
        MpiNotFoundError: ``use_mpi`` without a usable mpirun.
        LaunchError: the rendezvous store could not start.
    """
    slots = plan(settings)
    local_names = local_host_names()
    used_hosts = list(dict.fromkeys(s.hostname for s in slots))
    remote_hosts = [h for h in used_hosts if not is_local_host(h, local_names)]
    interfaces = (parse_interfaces(settings.network_interfaces, all_local=not remote_hosts)
                  if settings.network_interfaces else None)
    mpi_impl = mpi_launch.detect_mpirun() if settings.use_mpi else None
    if settings.output_filename and not settings.use_mpi:
        for slot in slots:
            try:
                os.makedirs(output_dir(settings, slot.rank), exist_ok=True)
            except OSError as e:
                raise BadInputError(f"--output-filename {settings.output_filename!r}: cannot create "
                                    f"{output_dir(settings, slot.rank)}: {e.strerror}") from None
    address = rendezvous_address(remote_hosts, interfaces)
    # Each worker advertises the address of the first listed interface its
    # host has; without a list, hvd-core uses the address each host routes to
    # the store from.
    interface = ",".join(interfaces) if interfaces else None
    if remote_hosts and not settings.use_mpi:
        _log(settings, f"checking ssh to {', '.join(remote_hosts)}")
        ssh.check_hosts(remote_hosts, settings.ssh_port, settings.ssh_identity_file,
                        settings.start_timeout)

    # A store only local workers reach over loopback stays off the network.
    loopback_only = address.startswith("127.") and not remote_hosts
    server, secret, port = start_rendezvous("127.0.0.1" if loopback_only else "0.0.0.0")
    _log(settings, f"rendezvous store at {address}:{port}; {len(slots)} rank(s) on "
                   f"{', '.join(used_hosts)}")
    try:
        if on_started is not None:
            on_started(server, address, port, secret)
        env = base_worker_env(settings, address, port, secret, gloo=not settings.use_mpi,
                              interface=interface)
        if settings.use_mpi:
            commands = [_mpirun_command(settings, mpi_impl, slots, env, all_local=not remote_hosts,
                                        launcher_address=address)]
        else:
            commands = [worker_command(settings, slot, env, slot.hostname in remote_hosts)
                        for slot in slots]
        probes = [_frozen_rank_probe(server)]
        if settings.use_mpi:
            probes.append(_mpi_failure_probe(port, secret))
        probe = _first_report(probes)
        result = run_job(commands, prefix_timestamp=settings.prefix_timestamp,
                         on_failure=on_failure, verbose=settings.verbose, failure_probe=probe)
        if on_finished is not None:
            on_finished(server, address, port, secret)
        return result
    finally:
        server.stop()


def worker_command(settings: LaunchSettings, slot: SlotInfo, env: Dict[str, str],
                   remote: bool) -> WorkerCommand:
    """The command that starts one rank at `slot` through the worker guard (over ssh when `remote`)."""
    worker_env = dict(env)
    worker_env.update(slot.to_env())
    label = str(slot.rank)
    if remote:
        spec = {"argv": settings.command, "env": ssh.remote_env(worker_env), "cwd": os.getcwd()}
        argv = ssh.ssh_argv(slot.hostname, ssh.guard_command(signal_as_exit_code=True),
                            settings.ssh_port, settings.ssh_identity_file,
                            connect_timeout=settings.start_timeout)
        return WorkerCommand(label, argv, dict(os.environ), spec, remote_host=slot.hostname,
                             output_dir=output_dir(settings, slot.rank))
    spec = {"argv": settings.command, "env": worker_env, "cwd": os.getcwd()}
    argv = [sys.executable, "-u", "-m", "horovod.runner.worker_guard"]
    return WorkerCommand(label, argv, dict(os.environ), spec,
                         output_dir=output_dir(settings, slot.rank))


# Who-am-I variables of an MPI launcher that horovodrun itself may run under:
# forwarded, they would override each rank's own.
_MPI_RANK_IDENTITY = re.compile(r"^(OMPI_COMM_WORLD_|OMPI_UNIVERSE_SIZE|PMIX_|PMI_|HYDRA_|MPI_LOCAL)")


def _mpirun_command(settings: LaunchSettings, mpi_impl, slots: Sequence[SlotInfo],
                    env: Dict[str, str], all_local: bool, launcher_address: str) -> WorkerCommand:
    # Remote MPI ranks get only the variables named here (local ones inherit
    # mpirun's environment): as with ssh, the whole environment but the login
    # session's own variables (NCCL_*, OMP_NUM_THREADS, WANDB_* ... arrive), as
    # Horovod forwards it. Values stay off the command line (names only).
    forwarded = sorted(k for k in ssh.remote_env(env) if not _MPI_RANK_IDENTITY.match(k))
    used_hosts: List[HostSlots] = []
    for host in settings.hosts:
        count = sum(1 for s in slots if s.hostname == host.hostname)
        if count:
            used_hosts.append(HostSlots(host.hostname, count))
    command = mpi_launch.rank_output_command(settings.command, settings.prefix_timestamp,
                                             settings.output_filename)
    argv = mpi_launch.mpirun_argv(
        mpi_impl, used_hosts, settings.num_proc, forwarded, command, all_local,
        ssh_port=settings.ssh_port, ssh_identity_file=settings.ssh_identity_file,
        tcp_only=settings.tcp_only, binding_args=settings.binding_args,
        mpi_args=settings.mpi_args, launcher_address=launcher_address)
    _log(settings, "running " + " ".join(argv))
    mpi_env = mpi_launch.mpirun_env(mpi_impl, env, settings.ssh_port, settings.ssh_identity_file)
    # mpirun runs under the guard too, so it is stopped even if the launcher is killed.
    guard = [sys.executable, "-u", "-m", "horovod.runner.worker_guard"]
    spec = {"argv": argv, "env": mpi_env, "cwd": os.getcwd()}
    return WorkerCommand("mpirun", guard, dict(os.environ), spec, prefix_output=False)


# Each engine refreshes "<job>/<start>/alive/<rank>" every quarter of its
# HOROVOD_PEER_TIMEOUT_SECONDS with "<beat> <peer timeout>", and sets it to
# "stopped" when it shuts down (hvd-core's engine/liveness.h). <start> is
# "g<n>" (the n-th hvd.init() of a process) or "r<n>" (round n of an elastic
# job). A rank whose key goes stale is frozen: its peers notice too, but in a
# ring each of them may blame its own neighbour; this watch blames no one
# but the silent rank.
ALIVE_KEY = re.compile(rb"^[0-9a-f]+/([gr][0-9]+)/alive/([0-9]+)$")


class LivenessWatch:
    """The last sign of life of every rank's engine, from the store ``server`` runs."""

    def __init__(self, server):
        self._lock = threading.Lock()
        self._last: Dict[Tuple[str, int], Tuple[float, Optional[float]]] = {}
        server.watch(self._on_change)

    def _on_change(self, key: bytes, value: bytes) -> None:
        match = ALIVE_KEY.match(key)
        if match is None:
            return
        fields = value.decode("ascii", "replace").split()
        try:
            timeout = None if fields == ["stopped"] else float(fields[1])
        except (IndexError, ValueError):
            return
        with self._lock:
            self._last[(match.group(1).decode(), int(match.group(2)))] = (time.monotonic(), timeout)

    def silent(self, start: Optional[str] = None, suspicious: bool = False) -> List[Tuple[str, int, float]]:
        """(start, rank, seconds) of every running engine silent for too long: 1.5 peer
        timeouts plus a second, or - when `suspicious`, as a failure already happened -
        half a peer timeout plus half a second (two missed beats). Only engines of
        `start` when given."""
        now = time.monotonic()
        found = []
        with self._lock:
            for (at, rank), (seen, timeout) in self._last.items():
                if timeout is None or (start is not None and at != start):
                    continue
                limit = timeout / 2 + 0.5 if suspicious else timeout * 1.5 + 1
                if now - seen > limit:
                    found.append((at, rank, now - seen))
        return sorted(found, key=lambda f: -f[2])


def frozen_reason(seconds: float) -> str:
    return (f"stopped responding: no sign of life from its engine for {seconds:.1f} s "
            "(frozen, stopped or cut off from the network; see HOROVOD_PEER_TIMEOUT_SECONDS)")


def _frozen_rank_probe(server):
    """Returns a probe for a frozen rank: one never exits by itself, so the job would
    otherwise wait for it for ever."""
    watch = LivenessWatch(server)

    def probe(force: bool = False) -> Optional[WorkerExit]:
        silent = watch.silent(suspicious=force)
        if not silent:
            return None
        _, rank, seconds = silent[0]
        return WorkerExit(str(rank), None, None, reason=frozen_reason(seconds))

    return probe


def _first_report(probes):
    def probe(force: bool = False) -> Optional[WorkerExit]:
        for p in probes:
            reported = p(force)
            if reported is not None:
                return reported
        return None
    return probe


def _mpi_failure_probe(port: int, secret: str, interval: float = 0.25):
    """Returns a probe for the first rank failure the MPI ranks report to the store. As in
    run_job, a rank killed by a signal before the first rank that exited with an error is
    the cause, if its report follows within _SIGNAL_DEATH_WINDOW_SECONDS."""
    from horovod.common.rendezvous import RendezvousClient
    from horovod.runner.job import _SIGNAL_DEATH_WINDOW_SECONDS
    from horovod.runner.mpi_rank_output import FIRST_FAILURE_KEY, FIRST_SIGNAL_DEATH_KEY
    client = RendezvousClient("127.0.0.1", port, secret, timeout=1)
    next_check = [0.0]
    error_seen_at: List[float] = []

    def read(key: str) -> Tuple[Optional[WorkerExit], float]:
        try:
            rank, code, when = client.get(key, timeout=0).decode().split()
        except Exception:  # Not reported (yet).
            return None, 0.0
        code = int(code)
        return WorkerExit(rank, code if code > 0 else None, -code if code < 0 else None), float(when)

    def probe(force: bool = False) -> Optional[WorkerExit]:
        now = time.monotonic()
        if now < next_check[0] and not force:
            return None
        next_check[0] = now + interval
        first, first_at = read(FIRST_FAILURE_KEY)
        if first is None or first.signal is not None:
            return first
        killed, killed_at = read(FIRST_SIGNAL_DEATH_KEY)
        if killed is not None and killed_at <= first_at:
            return killed
        if not error_seen_at:
            error_seen_at.append(now)
        return first if force or now - error_seen_at[0] >= _SIGNAL_DEATH_WINDOW_SECONDS else None

    return probe
