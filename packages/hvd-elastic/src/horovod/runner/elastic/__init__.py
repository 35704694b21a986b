# horovod/runner/elastic - elastic jobs for horovodrun and horovod.run():
# argument handling here, the driver in driver.py, host discovery and the
# blacklist in discovery.py. hvd-launch calls launch_elastic() (the command
# line) and run_elastic_args() (Horovod's _run_elastic) when elastic flags
# are given.
"""Elastic training: the driver that keeps a job running as hosts fail, leave and join."""

import argparse
import os
import sys
from typing import List, Optional

from horovod.runner.elastic.discovery import (DISCOVERY_SCRIPT_TIMEOUT_SECONDS, FixedHosts, HostDiscoveryScript,
                                              validate_cooldown_range)
from horovod.runner.elastic.driver import ElasticDriver, ElasticResult, ElasticSettings
from horovod.runner.errors import BadInputError, LaunchError

__all__ = ["ElasticSettings", "ElasticResult", "settings_from_args", "run_elastic", "run_elastic_args",
           "run_elastic_function", "launch_elastic"]


def settings_from_args(args: argparse.Namespace) -> ElasticSettings:
    """ElasticSettings from horovodrun's resolved arguments.

    Raises:
        BadInputError: the arguments do not describe a valid elastic job.
    """
    from horovod.runner.launch import _hosts_from_args, launch_settings
    hosts = _hosts_from_args(args) or []
    num_proc = args.num_proc if args.num_proc is not None else args.min_num_proc
    if num_proc is None:
        raise BadInputError("an elastic job needs -np or --min-np")
    return _settings(launch_settings(args, hosts, num_proc), use_mpi=getattr(args, "use_mpi", False),
                     discovery_script=args.host_discovery_script, slots=args.slots_per_host,
                     min_num_proc=args.min_num_proc, max_num_proc=args.max_num_proc,
                     elastic_timeout=args.elastic_timeout, reset_limit=args.reset_limit,
                     cooldown_range=args.cooldown_range or args.blacklist_cooldown_range)


def _settings(launch, use_mpi, discovery_script, slots, min_num_proc, max_num_proc, elastic_timeout, reset_limit,
              cooldown_range) -> ElasticSettings:
    """Checks an elastic job's arguments (horovodrun's flags or horovod.run()'s, named as
    the flags) and returns its settings; `launch` holds the static part, its ``hosts``
    the fixed hosts when there is no discovery script.

    Raises:
        BadInputError: naming the argument that is wrong.
    """
    if use_mpi:
        raise BadInputError("elastic training runs on hvd's own transports and cannot be combined with --mpi "
                            "(drop --mpi, or the elastic flags)")
    if elastic_timeout is None and os.environ.get("HOROVOD_ELASTIC_TIMEOUT"):
        elastic_timeout = float(os.environ["HOROVOD_ELASTIC_TIMEOUT"])
    if elastic_timeout is not None and elastic_timeout <= 0:
        raise BadInputError(f"--elastic-timeout must be positive, got {elastic_timeout:g}")
    num_proc = launch.num_proc
    min_num_proc = min_num_proc if min_num_proc is not None else num_proc
    if min_num_proc < 1:
        raise BadInputError(f"--min-np must be at least 1, got {min_num_proc}")
    if num_proc < min_num_proc:
        raise BadInputError(f"-np {num_proc} is smaller than --min-np {min_num_proc}")
    if max_num_proc is not None and max_num_proc < num_proc:
        raise BadInputError(f"--max-np {max_num_proc} is smaller than -np {num_proc}")
    if reset_limit is not None and reset_limit < 0:
        raise BadInputError(f"--reset-limit must be 0 or more, got {reset_limit}")
    try:
        cooldown_range = validate_cooldown_range(cooldown_range)
    except ValueError as e:
        raise BadInputError(str(e)) from None
    if discovery_script:
        if launch.hosts:
            raise BadInputError("--host-discovery-script and -H/--hostfile are mutually exclusive: the script "
                                "says which hosts to use")
        discovery = HostDiscoveryScript(discovery_script, slots, timeout=_discovery_timeout(elastic_timeout))
    elif launch.hosts:
        # A single fixed host is accepted (Horovod refuses it), though a
        # failure there blacklists it and so ends the job.
        total = sum(h.slots for h in launch.hosts)
        if total < num_proc:
            raise BadInputError(f"-np {num_proc} needs more slots than the {total} the fixed hosts have "
                                "(-H/--hostfile); a fixed host list never grows")
        discovery = FixedHosts({h.hostname: h.slots for h in launch.hosts})
    else:
        raise BadInputError("an elastic job needs --host-discovery-script, or -H/--hostfile with the hosts to use")
    return ElasticSettings(launch=launch, discovery=discovery, num_proc=num_proc, min_num_proc=min_num_proc,
                           max_num_proc=max_num_proc, elastic_timeout=elastic_timeout, reset_limit=reset_limit,
                           cooldown_range=cooldown_range)


def _discovery_timeout(elastic_timeout: Optional[float]) -> float:
    # A discovery script is never waited on longer than the job would wait
    # for hosts anyway.
    if elastic_timeout is None:
        return DISCOVERY_SCRIPT_TIMEOUT_SECONDS
    return min(DISCOVERY_SCRIPT_TIMEOUT_SECONDS, max(elastic_timeout, 1.0))


def run_elastic(settings: ElasticSettings, on_started=None, on_finished=None) -> ElasticResult:
    """Runs an elastic job: starts the rendezvous store, then the driver; returns how the job ended.

    ``on_started(server)`` is called once the store runs, before any worker starts;
    ``on_finished(server)`` after the workers ended, before the store stops.
    """
    from horovod.runner.job_setup import start_rendezvous
    from horovod.runner.network import interface_ipv4_address, parse_interfaces, rendezvous_address
    interfaces = parse_interfaces(settings.launch.network_interfaces) \
        if settings.launch.network_interfaces else None
    # Hosts may join later from anywhere: the store listens on every
    # interface, and workers dial the address that routes to the hosts known now.
    known = [h for h in settings.discovery.find_available_hosts_and_slots()] \
        if isinstance(settings.discovery, FixedHosts) else []
    from horovod.runner.hosts import is_local_host
    remote = [h for h in known if not is_local_host(h)]
    if remote:
        address = rendezvous_address(remote, interfaces)
    else:
        address = next(filter(None, map(interface_ipv4_address, interfaces or ())), None) or _default_address()
    # Each worker picks the first listed interface its own host has.
    interface = ",".join(interfaces) if interfaces else None
    server, secret, port = start_rendezvous("0.0.0.0")
    try:
        if on_started is not None:
            on_started(server)
        result = ElasticDriver(settings, server, address, port, secret, interface=interface).run()
        if on_finished is not None:
            on_finished(server)
        return result
    finally:
        server.stop()


def _default_address() -> str:
    # The address of this host that other hosts would reach: the one the
    # default route leaves from (nothing is sent), else loopback.
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere real
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def launch_elastic(args: argparse.Namespace) -> int:
    """horovodrun's elastic mode: runs the job, reports how it ended, returns the exit status."""
    try:
        settings = settings_from_args(args)
        result = run_elastic(settings)
    except LaunchError as e:
        sys.stderr.write(f"horovodrun: error: {e}\n")
        return e.exit_code
    if result.interrupted_by is not None:
        sys.stderr.write(f"horovodrun: interrupted (signal {result.interrupted_by}); all workers stopped\n")
    elif result.error is not None:
        sys.stderr.write(f"horovodrun: elastic job failed: {result.error}\n")
    return result.exit_code


def run_elastic_args(args: argparse.Namespace) -> Optional[List]:
    """Horovod's ``_run_elastic(args)``: runs the job; raises RuntimeError when it failed."""
    from horovod.runner.launch import _args_in_hvd_terms
    if getattr(args, "run_func", None) is not None:
        raise BadInputError("elastic jobs of a Python function are started with horovod.run(func, "
                            "min_num_proc=..., ...)")
    result = run_elastic(settings_from_args(_args_in_hvd_terms(args)))
    if result.interrupted_by is not None:
        raise RuntimeError(f"the elastic job was interrupted by signal {result.interrupted_by}")
    if result.error is not None:
        raise RuntimeError(result.error)
    return None


def run_elastic_function(launch, on_started, on_finished, min_num_proc=None, max_num_proc=None,
                         host_discovery_script=None, slots=None, reset_limit=None, cooldown_range=None,
                         elastic_timeout=None) -> ElasticResult:
    """The elastic part of ``horovod.run()``: `launch` holds the worker command and the
    static settings (its ``hosts`` are the fixed hosts when no discovery script is given)."""
    settings = _settings(launch, use_mpi=getattr(launch, "use_mpi", False), discovery_script=host_discovery_script,
                         slots=slots, min_num_proc=min_num_proc, max_num_proc=max_num_proc,
                         elastic_timeout=elastic_timeout, reset_limit=reset_limit, cooldown_range=cooldown_range)
    result = run_elastic(settings, on_started, on_finished)
    if result.error is not None and result.first_failure is None and result.interrupted_by is None:
        raise RuntimeError(f"horovod.run(): the elastic job failed: {result.error}")
    return result
