"""horovodrun / hvdrun: start a distributed training job.

Usage
=====

Run 4 processes on this machine::

    horovodrun -np 4 python train.py

Run 8 processes on two hosts with 4 slots each (ssh to the remote ones)::

    horovodrun -np 8 -H server1:4,server2:4 python train.py
    horovodrun -np 8 -hostfile hosts.txt python train.py    # "server1 slots=4" per line

Hand the job to ``mpirun`` (Open MPI or MPICH)::

    horovodrun --mpi -np 4 python train.py

``hvdrun`` is the same command.  ``-np`` defaults to the total slot count when
hosts are given; ``-H`` defaults to ``localhost:<np>``.

How ranks are placed
====================

Hosts are filled in the order given, each up to its slot count.  Rank ``r``
gets ``HOROVOD_RANK``; ``HOROVOD_LOCAL_RANK``/``HOROVOD_LOCAL_SIZE`` count the
ranks on its host; ``HOROVOD_CROSS_RANK``/``HOROVOD_CROSS_SIZE`` count the hosts
holding a rank with the same local rank.  ``localhost``, ``127.0.0.1`` and this
machine's host name start directly; every other host (``127.0.0.2`` too) is
reached with ``ssh -o BatchMode=yes`` (``-p``, ``-i``; extra client options in
``HVDRUN_SSH_OPTIONS``) and needs hvd-launch installed at the launcher's
Python path (or ``HVDRUN_REMOTE_PYTHON``).

Worker environment
==================

Each worker gets the caller's environment and working directory, plus
``HOROVOD_RANK``, ``HOROVOD_SIZE``, ``HOROVOD_LOCAL_RANK``,
``HOROVOD_LOCAL_SIZE``, ``HOROVOD_CROSS_RANK``, ``HOROVOD_CROSS_SIZE``,
``HOROVOD_HOSTNAME``, ``HOROVOD_GLOO_RENDEZVOUS_ADDR``,
``HOROVOD_GLOO_RENDEZVOUS_PORT``, ``HOROVOD_SECRET_KEY`` (a fresh secret per
job; the rendezvous store and every peer connection authenticate with it),
``HOROVOD_CONTROLLER=gloo``, ``HOROVOD_CPU_OPERATIONS=gloo``,
``PYTHONUNBUFFERED=1``, ``HOROVOD_GLOO_IFACE`` when ``--network-interfaces``
is given, and the HOROVOD_* variable of every tuning flag that is set (see
``--help``).  Under ``--mpi`` the rank variables come from mpirun instead.

Every flag can also be set through an environment variable, ``HVDRUN_`` plus
the flag's long name in capitals with ``_`` for ``-`` (``HVDRUN_NUM_PROC=4``,
``HVDRUN_HOSTS=a:2,b:2``, ``HVDRUN_MPI=1``).  Precedence: command line, then
``--config-file``, then the environment.  ``HOROVOD_START_TIMEOUT`` and
``HOROVOD_GLOO_IFACE`` are read as well, as Horovod does.

Output
======

Each line a worker prints is forwarded as ``[rank]<stdout>:line`` or
``[rank]<stderr>:line`` (``--prefix-output-with-timestamp`` puts the time in
front).  ``--output-filename DIR`` also writes each rank's raw output to
``DIR/rank.N/stdout`` and ``DIR/rank.N/stderr``.

Failures
========

When a rank exits non-zero or is killed, every other rank is sent SIGTERM and
SIGKILLed after a grace period (``HVDRUN_KILL_GRACE_SECONDS``, default 5),
and horovodrun exits with the failing rank's exit code (128 + signal number
when it was killed), after naming the first rank that failed.  Ctrl-C or
SIGTERM to horovodrun stops the whole job the same way and exits with
128 + signal.  Each rank runs in its own process group under a small guard
that also stops it if horovodrun itself dies, so nothing is left running.

Bad input -- a malformed ``-H`` or host file, ``-np`` larger than the slots,
no command, ``--gloo`` with ``--mpi``, an unknown interface -- exits with
status 2 before anything starts; an unreachable host, an ssh failure or a
missing ``mpirun`` exits with status 1 within ``--start-timeout`` seconds.

Elastic training
================

``--min-np``, ``--max-np``, ``--host-discovery-script`` and the other elastic
flags are accepted but need the hvd-elastic package (``pip install
hvd-elastic``).
"""

import argparse
import importlib
import os
import sys
from typing import Dict, List, Optional

from horovod.runner.config_file import load_config_file
from horovod.runner import ssh
from horovod.runner.errors import BadInputError, ElasticNotInstalledError, LaunchError
from horovod.runner.hosts import HostSlots, parse_hostfile, parse_hosts
from horovod.runner.job_setup import DEFAULT_START_TIMEOUT, LaunchSettings, launch, plan
from horovod.runner.tuning_flags import LOG_LEVELS, TUNING_FLAGS

ENV_PREFIX = "HVDRUN_"
# Variables Horovod itself reads for some flags, honoured as a second mirror.
_HOROVOD_ENV_MIRRORS = {"start_timeout": "HOROVOD_START_TIMEOUT",
                        "network_interfaces": "HOROVOD_GLOO_IFACE"}
ELASTIC_DESTS = ("min_num_proc", "max_num_proc", "slots_per_host", "elastic_timeout",
                 "reset_limit", "cooldown_range", "host_discovery_script",
                 "blacklist_cooldown_range")
# Options whose dest is handled by argparse itself or needs no mirror.
_NO_MIRROR = {"help", "version", "command"}


def env_name(flags) -> str:
    """Returns the environment mirror of a flag: ``HVDRUN_`` + its first long name (``HVDRUN_NUM_PROC``)."""
    long_name = next(f for f in flags if f.startswith("--"))
    return ENV_PREFIX + long_name[2:].upper().replace("-", "_")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=40, width=100)


# argparse dest -> environment mirror, filled as the parser is built.
_MIRRORS: Dict[str, str] = {}


def _add(group, *flags, env_extra: Optional[str] = None, **kwargs):
    mirror = env_name(flags)
    shown = mirror + (f" or {env_extra}" if env_extra else "")
    kwargs["help"] = f"{kwargs.get('help', '')} [env {shown}]".strip()
    kwargs.setdefault("default", None)
    action = group.add_argument(*flags, **kwargs)
    _MIRRORS[action.dest] = mirror
    return action


def build_parser() -> argparse.ArgumentParser:
    """Returns the horovodrun argument parser (every default None, so explicit flags are known)."""
    parser = argparse.ArgumentParser(
        prog="horovodrun",
        usage="horovodrun [options] -np N [-H host1:slots,...] COMMAND [ARGS...]",
        description="Start a Horovod job: run COMMAND as N ranks on local and remote hosts.",
        epilog="Examples:\n"
               "  horovodrun -np 4 python train.py\n"
               "  horovodrun -np 8 -H server1:4,server2:4 python train.py\n"
               "  horovodrun --mpi -np 4 python train.py\n"
               "  horovodrun --check-build\n\n"
               "The full manual (environment, failure modes): python -m pydoc horovod.runner.launch",
        formatter_class=_Formatter, allow_abbrev=False)
    parser.add_argument("-v", "--version", action="store_true", default=None,
                        help="Print the version and exit.")

    job = parser.add_argument_group("job")
    _add(job, "-np", "--num-proc", dest="num_proc", type=int, metavar="N",
         help="Number of ranks to start (default: total slots of -H/--hostfile).")
    _add(job, "-cb", "--check-build", dest="check_build", action="store_true",
         help="Show which frameworks, controllers and tensor operations are available, and exit.")
    _add(job, "--start-timeout", dest="start_timeout", type=float, metavar="SECONDS",
         env_extra="HOROVOD_START_TIMEOUT",
         help=f"Seconds to wait for remote hosts to answer over ssh (default {DEFAULT_START_TIMEOUT:g}).")
    _add(job, "--config-file", dest="config_file", metavar="FILE",
         help="YAML file with tuning parameters in Horovod's sections (params, autotune, "
              "timeline, stall_check, library_options, logging); flags win over it.")
    _add(job, "--disable-cache", dest="disable_cache", action="store_true",
         help="Accepted for Horovod compatibility (no effect: hvd keeps no cache of host checks).")
    _add(job, "--verbose", dest="verbose", action="store_true",
         help="Print what the launcher does (host checks, rendezvous, mpirun command).")

    hosts = parser.add_argument_group("hosts and ssh")
    _add(hosts, "-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
         help="Comma-separated hosts with slot counts, e.g. server1:4,server2:4 "
              "(default localhost:<np>).")
    _add(hosts, "-hostfile", "--hostfile", dest="hostfile", metavar="FILE",
         help="File with one 'hostname slots=N' per line.")
    _add(hosts, "-p", "--ssh-port", dest="ssh_port", type=int, metavar="PORT",
         help="ssh port of the remote hosts.")
    _add(hosts, "-i", "--ssh-identity-file", dest="ssh_identity_file", metavar="FILE",
         help="ssh private key for the remote hosts.")
    _add(hosts, "--network-interfaces", "--network-interface", dest="network_interfaces",
         metavar="IF,...", env_extra="HOROVOD_GLOO_IFACE",
         help="Comma-separated NICs of the worker hosts (names may differ per host): each rank "
              "talks over the first one its host has (passed on as HOROVOD_GLOO_IFACE). "
              "Default: the routes between the hosts decide.")

    controller = parser.add_argument_group("controller").add_mutually_exclusive_group()
    _add(controller, "--gloo", dest="use_gloo", action="store_true",
         help="Start ranks directly and over ssh (the default).")
    _add(controller, "--mpi", dest="use_mpi", action="store_true",
         help="Start ranks with mpirun (Open MPI or MPICH).")
    _add(controller, "--jsrun", dest="use_jsrun", action="store_true",
         help="Accepted for Horovod compatibility (no effect: hvd has no jsrun launcher; ranks "
              "start as with --gloo).")
    mpi = parser.add_argument_group("mpi")
    _add(mpi, "--mpi-args", dest="mpi_args", metavar="'ARGS'",
         help="Extra arguments for mpirun, as one quoted string.")
    _add(mpi, "--tcp", dest="tcp_flag", action="store_true",
         help="With --mpi: make MPI use TCP only.")
    _add(mpi, "--binding-args", dest="binding_args", metavar="'ARGS'",
         help="With --mpi: process binding arguments replacing '--bind-to none --map-by slot'.")

    output = parser.add_argument_group("output")
    _add(output, "--output-filename", dest="output_filename", metavar="DIR",
         help="Also write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr.")
    _add(output, "-prefix-timestamp", "--prefix-output-with-timestamp", dest="prefix_output_with_timestamp",
         action="store_true", help="Put the time in front of each forwarded output line.")

    tuning = parser.add_argument_group("tuning (each sets the HOROVOD_* variable named)")
    for flag in TUNING_FLAGS:
        kwargs = {"dest": flag.dest, "help": f"{flag.help} -> {flag.env_var}."}
        group = tuning
        if flag.kind is bool:
            kwargs["action"] = "store_true"
            if flag.negations:
                # As Horovod: --x and --no-x, one or the other.
                group = tuning.add_mutually_exclusive_group()
        else:
            kwargs["type"] = flag.kind
            kwargs["metavar"] = flag.kind.__name__.upper()
        if flag.dest == "log_level":
            kwargs["choices"] = LOG_LEVELS
            kwargs["type"] = str.upper
            kwargs["metavar"] = "LEVEL"
        _add(group, flag.flag, *flag.aliases, **kwargs)
        if flag.negations:
            group.add_argument(*flag.negations, dest=flag.dest, action="store_false", default=None,
                               help=f"The opposite: sets {flag.env_var}=0.")

    elastic = parser.add_argument_group("elastic (needs hvd-elastic)")
    _add(elastic, "--min-np", "--min-num-proc", dest="min_num_proc", type=int, metavar="N",
         help="Fewest ranks to keep training with.")
    _add(elastic, "--max-np", "--max-num-proc", dest="max_num_proc", type=int, metavar="N",
         help="Most ranks to scale up to.")
    _add(elastic, "--slots-per-host", "--slots", dest="slots_per_host", type=int, metavar="N",
         help="Slots of each discovered host.")
    _add(elastic, "--elastic-timeout", dest="elastic_timeout", type=int, metavar="SECONDS",
         help="Seconds to wait for enough hosts.")
    _add(elastic, "--reset-limit", dest="reset_limit", type=int, metavar="N",
         help="Most resets before the job fails.")
    _add(elastic, "--cooldown-range", dest="cooldown_range", type=int, nargs=2,
         metavar=("MIN", "MAX"), help="Seconds a failing host is blacklisted.")
    _add(elastic, "--blacklist-cooldown-range", dest="blacklist_cooldown_range", type=int,
         nargs=2, metavar=("MIN", "MAX"), help="Same as --cooldown-range (old name).")
    _add(elastic, "--host-discovery-script", dest="host_discovery_script", metavar="SCRIPT",
         help="Executable printing the available hosts as host:slots lines.")

    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="The program to run and its arguments.")
    return parser


def _parse_env_value(action: argparse.Action, name: str, text: str):
    if isinstance(action, argparse._StoreTrueAction):
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("", "0", "false", "no", "off"):
            return False
        raise BadInputError(f"{name}={text!r}: expected 1/0, true/false, yes/no or on/off")
    convert = action.type or str
    try:
        if action.nargs == 2:
            return [convert(part) for part in text.split()]
        value = convert(text)
    except (TypeError, ValueError):
        raise BadInputError(f"{name}={text!r} is not a valid value for {action.option_strings[-1]}") \
            from None
    if action.choices is not None and value not in action.choices:
        raise BadInputError(f"{name}={text!r}: choose from {', '.join(action.choices)}")
    return value


def resolve_args(parser: argparse.ArgumentParser, argv: Optional[List[str]] = None,
                 environ: Optional[Dict[str, str]] = None) -> argparse.Namespace:
    """Parses ``argv`` and fills unset flags from ``--config-file``, then the environment mirrors.

    Raises:
        BadInputError: a config file or environment value is invalid.
    """
    environ = os.environ if environ is None else environ
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]

    config_path = args.config_file or environ.get(_MIRRORS["config_file"])
    if config_path:
        for dest, value in load_config_file(config_path).items():
            if getattr(args, dest, None) is None:
                setattr(args, dest, value)

    for action in parser._actions:
        if action.dest in _NO_MIRROR or getattr(args, action.dest, None) is not None:
            continue
        if isinstance(action, argparse._StoreFalseAction):
            continue  # a --no-x flag: its variable is the --x flag's
        for name in (_MIRRORS.get(action.dest), _HOROVOD_ENV_MIRRORS.get(action.dest)):
            if name and environ.get(name) not in (None, ""):
                setattr(args, action.dest, _parse_env_value(action, name, environ[name]))
                break
    if args.use_gloo and args.use_mpi:
        raise BadInputError("--gloo and --mpi are mutually exclusive; choose one")
    return args


def _hosts_from_args(args: argparse.Namespace) -> Optional[List[HostSlots]]:
    if args.hosts and args.hostfile:
        raise BadInputError("-H/--hosts and -hostfile/--hostfile are mutually exclusive; choose one")
    if args.hosts:
        return parse_hosts(args.hosts)
    if args.hostfile:
        return parse_hostfile(args.hostfile)
    return None


def settings_from_args(args: argparse.Namespace) -> LaunchSettings:
    """Turns resolved arguments into LaunchSettings (raises BadInputError for bad input)."""
    if not args.command:
        raise BadInputError("no command given; usage: horovodrun -np 2 python train.py")
    hosts = _hosts_from_args(args)
    num_proc = args.num_proc
    if num_proc is None:
        if hosts is None:
            raise BadInputError("-np/--num-proc is required when no hosts are given "
                                "(e.g. horovodrun -np 2 python train.py)")
        num_proc = sum(h.slots for h in hosts)
    if num_proc < 1:
        raise BadInputError(f"-np/--num-proc must be at least 1, got {num_proc}")
    if hosts is None:
        hosts = [HostSlots("localhost", num_proc)]
    return launch_settings(args, hosts, num_proc)


def launch_settings(args: argparse.Namespace, hosts: List[HostSlots], num_proc: int) -> LaunchSettings:
    """LaunchSettings from the options every job shares (ssh, output, tuning...), with the given
    hosts and rank count (the elastic driver's come from host discovery)."""
    if not args.command:
        raise BadInputError("no command given; usage: horovodrun -np 2 python train.py")
    if args.ssh_identity_file and not os.path.isfile(args.ssh_identity_file):
        raise BadInputError(f"-i/--ssh-identity-file {args.ssh_identity_file!r} does not exist")
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        raise BadInputError(f"-p/--ssh-port {args.ssh_port} is not a TCP port")
    if args.start_timeout is not None and args.start_timeout <= 0:
        raise BadInputError(f"--start-timeout must be positive, got {args.start_timeout:g}")
    if args.mpi_args is not None and not args.use_mpi:
        raise BadInputError("--mpi-args needs --mpi")
    tuning = {flag.dest: getattr(args, flag.dest) for flag in TUNING_FLAGS}
    return LaunchSettings(
        command=list(args.command), num_proc=num_proc, hosts=hosts,
        ssh_port=args.ssh_port, ssh_identity_file=args.ssh_identity_file,
        use_mpi=bool(args.use_mpi), mpi_args=args.mpi_args, tcp_only=bool(args.tcp_flag),
        binding_args=args.binding_args, network_interfaces=args.network_interfaces,
        output_filename=args.output_filename,
        prefix_timestamp=bool(args.prefix_output_with_timestamp), verbose=bool(args.verbose),
        start_timeout=args.start_timeout or DEFAULT_START_TIMEOUT, tuning=tuning)


def _elastic_requested(args: argparse.Namespace) -> bool:
    # As Horovod: a discovery script or --min-np makes a job elastic; the
    # other elastic flags (--max-np too) only tune such a job.
    return any(getattr(args, dest, None) is not None for dest in ("host_discovery_script", "min_num_proc"))


def _elastic_module():
    # hvd-elastic installs horovod.runner.elastic.
    try:
        elastic = importlib.import_module("horovod.runner.elastic")
    except ImportError:
        elastic = None
    if elastic is None or not hasattr(elastic, "launch_elastic"):
        raise ElasticNotInstalledError(
            "elastic training (--min-np, --max-np, --host-discovery-script, ...) needs the "
            "hvd-elastic package: pip install hvd-elastic")
    return elastic


def _run_elastic(args: argparse.Namespace):
    """Runs an elastic job from parsed arguments, as Horovod's ``_run_elastic``: returns when
    it succeeded (a function's results in rank order when ``args.run_func`` is set) and
    raises RuntimeError naming the cause when it failed."""
    return _elastic_module().run_elastic_args(args)


def _inert_flag_notices(args: argparse.Namespace) -> List[str]:
    """One line for each launcher flag given that has no effect in hvd. (Tuning flags
    without effect are reported by the engine, which sees the variables they set.)"""
    notices = []
    if args.use_jsrun:
        notices.append("--jsrun has no effect: hvd has no jsrun launcher; the ranks start as with --gloo")
    if args.disable_cache:
        notices.append("--disable-cache has no effect: hvd keeps no cache of host checks")
    for dest, flag in (("max_num_proc", "--max-np"), ("elastic_timeout", "--elastic-timeout"),
                       ("reset_limit", "--reset-limit"),
                       ("slots_per_host", "--slots-per-host"), ("cooldown_range", "--cooldown-range"),
                       ("blacklist_cooldown_range", "--blacklist-cooldown-range")):
        if getattr(args, dest, None) is not None:
            notices.append(f"{flag} has no effect: the job is not elastic (that takes --min-np or "
                           "--host-discovery-script)")
    return notices


def _describe_rank(settings: LaunchSettings, label: str) -> str:
    if label == "mpirun":
        return "mpirun"
    try:
        slot = plan(settings)[int(label)]
        return f"rank {label} (host {slot.hostname}, local rank {slot.local_rank})"
    except (ValueError, IndexError):
        return f"rank {label}"


def run_commandline(argv: Optional[List[str]] = None) -> int:
    """Runs horovodrun with ``argv`` and returns its exit status."""
    parser = build_parser()
    try:
        args = resolve_args(parser, argv)
        if args.version:
            from horovod.runner import __version__
            print(__version__)
            return 0
        if args.check_build:
            from horovod.runner.check_build import check_build
            check_build(verbose=bool(args.verbose))
            return 0
        if _elastic_requested(args):
            return _elastic_module().launch_elastic(args)
        settings = settings_from_args(args)
        for notice in _inert_flag_notices(args):
            sys.stderr.write(f"horovodrun: {notice}\n")

        def on_failure(status):
            if status.label == "mpirun":
                return  # mpirun stops its ranks itself; the summary follows.
            sys.stderr.write(f"horovodrun: {_describe_rank(settings, status.label)} "
                             f"{status.describe()}; stopping the other ranks\n")
            sys.stderr.flush()

        result = launch(settings, on_failure=on_failure)
    except LaunchError as e:
        sys.stderr.write(f"horovodrun: error: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        # Ctrl-C before any rank started (e.g. during the ssh checks).
        sys.stderr.write("horovodrun: interrupted before the job started\n")
        return 130
    if result.interrupted_by is not None:
        sys.stderr.write(f"horovodrun: interrupted (signal {result.interrupted_by}); "
                         "all ranks stopped\n")
    elif result.first_failure is not None:
        failure = result.first_failure
        if failure.label == "mpirun":
            sys.stderr.write(f"horovodrun: job failed: mpirun {failure.describe()} "
                             "(the failing rank is named above)\n")
        else:
            sys.stderr.write(f"horovodrun: job failed: {_describe_rank(settings, failure.label)} "
                             f"{failure.describe()} (first failure)\n")
    return result.exit_code


# Horovod's private launcher entry points, which its test harnesses and some
# integrations call: thin layers over the functions above.

def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses horovodrun's command line (``sys.argv[1:]`` by default), with the config
    file and environment mirrors applied, as Horovod's ``parse_args()``."""
    return resolve_args(build_parser(), sys.argv[1:] if argv is None else argv)


def _args_in_hvd_terms(args) -> argparse.Namespace:
    """A parsed horovodrun namespace from ``args`` (a parse_args() result or a
    ``_HorovodArgs``), reading Horovod's spellings of a few options."""
    resolved = resolve_args(build_parser(), ["true"], environ={})
    for name, value in vars(args).items():
        if value is not None and hasattr(resolved, name):
            setattr(resolved, name, value)
    nics = getattr(args, "nics", None) or getattr(args, "nic", None)
    if nics and not resolved.network_interfaces:
        resolved.network_interfaces = nics if isinstance(nics, str) else ",".join(nics)
    if getattr(args, "slots", None) is not None and resolved.slots_per_host is None:
        resolved.slots_per_host = args.slots
    if getattr(args, "log_with_timestamp", None) is not None and resolved.log_hide_timestamp is None:
        resolved.log_hide_timestamp = not args.log_with_timestamp
    resolved.command = list(args.command or [])
    return resolved


def _run(args):
    """Runs a job from Horovod-style arguments: ``args.run_func`` on every rank (returns the
    results in rank order) or ``args.command`` (returns None).

    Raises:
        RuntimeError: a rank failed.
    """
    resolved = _args_in_hvd_terms(args)
    if _elastic_requested(resolved):
        return _run_elastic(resolved)
    if getattr(args, "run_func", None) is not None:
        from horovod.runner.run_api import run as run_function
        return run_function(args.run_func, num_proc=resolved.num_proc, hosts=resolved.hosts,
                            hostfile=resolved.hostfile, start_timeout=resolved.start_timeout,
                            ssh_port=resolved.ssh_port, ssh_identity_file=resolved.ssh_identity_file,
                            output_filename=resolved.output_filename, verbose=resolved.verbose,
                            use_mpi=resolved.use_mpi, mpi_args=resolved.mpi_args,
                            network_interfaces=resolved.network_interfaces)
    result = launch(settings_from_args(resolved))
    if result.exit_code != 0:
        raise RuntimeError(f"horovodrun: the job failed with exit status {result.exit_code}")
    return None


def _check_all_hosts_ssh_successful(host_addresses, ssh_port=None, ssh_identity_file=None, fn_cache=None):
    """True when every host accepts ssh (and has hvd-launch); prints why a host does not."""
    try:
        ssh.check_hosts(list(host_addresses), ssh_port, ssh_identity_file, DEFAULT_START_TIMEOUT)
    except LaunchError as e:
        print(f"ssh not successful: {e}")
        return False
    return True


def run_controller(use_gloo, gloo_run, use_mpi, mpi_run, use_jsrun, js_run, verbosity):
    """Calls the launch function of the chosen controller. hvd's own controller takes
    Gloo's place and is the default (Horovod's default was MPI when built with it);
    jsrun is not supported."""
    if use_jsrun:
        raise ValueError("hvd has no jsrun launcher; use --gloo (the default) or --mpi")
    if use_mpi:
        mpi_run()
    else:
        gloo_run()


def main() -> None:
    """Console entry point of ``horovodrun`` and ``hvdrun``."""
    sys.exit(run_commandline())


if __name__ == "__main__":
    main()
