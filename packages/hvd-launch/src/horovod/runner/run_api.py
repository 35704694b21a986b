"""``horovod.run()``: run a Python function on every rank and collect the results.

The function and its arguments are pickled with cloudpickle into the job's
rendezvous store; each rank runs ``python -m horovod.runner.run_task``, which
fetches them, calls the function and stores its return value (or exception
and traceback) back under its rank.  Values cross the store, so each pickled
function and result must stay under the store's 16 MiB request limit.
"""

import os
import sys
import sysconfig
from typing import Any, Callable, Dict, List, Optional, Sequence

from horovod.runner.errors import BadInputError
from horovod.runner.hosts import HostSlots, parse_hostfile, parse_hosts
from horovod.runner.launcher import DEFAULT_START_TIMEOUT, LaunchSettings, launch

FUNCTION_KEY = "hvd.run/function"
RESULT_KEY_PREFIX = "hvd.run/result/"


class RemoteTraceback(Exception):
    """The traceback of an exception raised on a rank, attached as ``__cause__``."""

    def __str__(self):
        return self.args[0]


def _caller_import_paths() -> List[str]:
    # Directories the caller added to sys.path (its script dir, a src tree,
    # a test dir) so workers can unpickle functions defined there; the
    # interpreter's own directories are left to the worker's interpreter.
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            own.add(os.path.realpath(path))
    extra = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(path) or any(path == o or path.startswith(o + os.sep) for o in own):
            continue
        if path not in extra:
            extra.append(path)
    return extra


def run(func: Callable, args: Sequence = (), kwargs: Optional[Dict[str, Any]] = None,
        num_proc: Optional[int] = None, hosts: Optional[str] = None,
        hostfile: Optional[str] = None, start_timeout: Optional[float] = None,
        ssh_port: Optional[int] = None, ssh_identity_file: Optional[str] = None,
        disable_cache: Optional[bool] = None, output_filename: Optional[str] = None,
        verbose: Optional[bool] = None, use_gloo: Optional[bool] = None,
        use_mpi: Optional[bool] = None, mpi_args: Optional[str] = None,
        network_interfaces: Optional[str] = None, network_interface: Optional[str] = None,
        executable: Optional[str] = None, prefix_output_with_timestamp: bool = False,
        np: Optional[int] = None, **unsupported) -> List[Any]:
    """Launches a Horovod job that runs ``func(*args, **kwargs)`` on every rank.

    Args:
        func: The function to run; it is pickled with cloudpickle.
        args: Positional arguments for ``func``.
        kwargs: Keyword arguments for ``func``.
        num_proc: Number of ranks (``np`` is Horovod's spelling); default: the total
            slots of ``hosts``/``hostfile``, else 1.
        hosts: Host list as for ``-H``, e.g. ``"server1:2,server2:2"``
            (default ``localhost:num_proc``).
        hostfile: Host file as for ``--hostfile``.
        start_timeout: Seconds to wait for remote hosts over ssh (default 30).
        ssh_port: ssh port of remote hosts.
        ssh_identity_file: ssh private key for remote hosts.
        disable_cache: Accepted for compatibility; nothing is cached.
        output_filename: Directory for ``rank.N/stdout`` and ``rank.N/stderr``.
        verbose: Print what the launcher does.
        use_gloo: Start ranks directly and over ssh (the default).
        use_mpi: Start ranks with mpirun.
        mpi_args: Extra mpirun arguments.
        network_interfaces: Interfaces to use (``network_interface`` is Horovod's spelling).
        executable: Python interpreter for the workers (default: this one).
        prefix_output_with_timestamp: Put the time in front of each output line.

    Returns:
        The return values of ``func``, one per rank, in rank order.

    Raises:
        The exception a rank raised (the first rank to fail), with the remote
        traceback as its ``__cause__`` and the rank named in its notes;
        RuntimeError when a rank died without returning; KeyboardInterrupt
        when the launcher was interrupted; BadInputError/LaunchError for bad
        arguments or hosts that cannot be reached.
    """
    import cloudpickle
    from horovod.common.rendezvous import RendezvousClient

    if unsupported:
        elastic = {"min_num_proc", "max_num_proc", "min_np", "max_np", "slots", "reset_limit",
                   "cooldown_range"}
        if set(unsupported) & elastic:
            raise BadInputError("elastic horovod.run() (min_num_proc, max_num_proc, ...) needs the "
                                "hvd-elastic package: pip install hvd-elastic")
        raise TypeError(f"run() got unexpected keyword arguments: {', '.join(sorted(unsupported))}")
    if use_gloo and use_mpi:
        raise BadInputError("use_gloo and use_mpi are mutually exclusive; choose one")
    if hosts and hostfile:
        raise BadInputError("hosts and hostfile are mutually exclusive; choose one")
    host_list: Optional[List[HostSlots]] = None
    if hosts:
        host_list = parse_hosts(hosts)
    elif hostfile:
        host_list = parse_hostfile(hostfile)
    if num_proc is None:
        num_proc = np
    if num_proc is None:
        num_proc = 1 if host_list is None else sum(h.slots for h in host_list)
    if host_list is None:
        host_list = [HostSlots("localhost", num_proc)]

    payload = cloudpickle.dumps((func, tuple(args), dict(kwargs or {})))
    python_path = os.pathsep.join(
        _caller_import_paths() + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    settings = LaunchSettings(
        command=[executable or sys.executable, "-u", "-m", "horovod.runner.run_task"],
        num_proc=num_proc, hosts=host_list, ssh_port=ssh_port,
        ssh_identity_file=ssh_identity_file, use_mpi=bool(use_mpi), mpi_args=mpi_args,
        network_interfaces=network_interfaces or network_interface,
        output_filename=output_filename, prefix_timestamp=prefix_output_with_timestamp,
        verbose=bool(verbose), start_timeout=start_timeout or DEFAULT_START_TIMEOUT,
        extra_env={"PYTHONPATH": python_path} if python_path else {})

    results: Dict[int, tuple] = {}

    def store_function(_server, _addr, port, secret):
        RendezvousClient("127.0.0.1", port, secret).set(FUNCTION_KEY, payload)

    def collect_results(_server, _addr, port, secret):
        client = RendezvousClient("127.0.0.1", port, secret, timeout=5)
        for rank in range(num_proc):
            try:
                results[rank] = cloudpickle.loads(client.get(RESULT_KEY_PREFIX + str(rank), timeout=0))
            except Exception:  # Missing: the rank died before reporting.
                pass

    job = launch(settings, on_started=store_function, on_finished=collect_results)
    if job.interrupted_by is not None:
        raise KeyboardInterrupt(f"horovod.run() interrupted by signal {job.interrupted_by}")

    failed_ranks = []
    if job.first_failure is not None and job.first_failure.label.isdigit():
        failed_ranks.append(int(job.first_failure.label))
    failed_ranks += sorted(r for r, outcome in results.items() if outcome[0] == "error")
    for rank in failed_ranks:
        outcome = results.get(rank)
        if outcome is not None and outcome[0] == "error":
            _, exception, traceback_text = outcome
            if exception is None:
                raise RuntimeError(f"rank {rank} raised an exception that could not be pickled:\n"
                                   f"{traceback_text}")
            if hasattr(exception, "add_note"):
                exception.add_note(f"(raised on rank {rank} of horovod.run())")
            raise exception from RemoteTraceback(
                f"\n\nTraceback on rank {rank}:\n{traceback_text}")
    if job.first_failure is not None:
        label = job.first_failure.label
        who = "mpirun" if label == "mpirun" else f"rank {label}"
        raise RuntimeError(f"horovod.run(): {who} {job.first_failure.describe()} before "
                           "returning a result")
    missing = [r for r in range(num_proc) if r not in results]
    if missing:
        raise RuntimeError(f"horovod.run(): rank(s) {missing} exited without returning a result")
    return [results[rank][1] for rank in range(num_proc)]
