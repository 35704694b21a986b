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
from horovod.runner.job_setup import DEFAULT_START_TIMEOUT, LaunchSettings, launch

FUNCTION_KEY = "hvd.run/function"
RESULT_KEY_PREFIX = "hvd.run/result/"
# Workers report their result under the rank they have when the function
# returns (in an elastic job, a rank of the last round), and that round's size.
RESULT_SIZE_KEY = "hvd.run/size"


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
        np: Optional[int] = None, min_num_proc: Optional[int] = None, max_num_proc: Optional[int] = None,
        slots: Optional[int] = None, reset_limit: Optional[int] = None,
        cooldown_range: Optional[Sequence[int]] = None, host_discovery_script: Optional[str] = None,
        elastic_timeout: Optional[float] = None, min_np: Optional[int] = None, max_np: Optional[int] = None,
        **unsupported) -> List[Any]:
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
        min_num_proc: Makes the job elastic (needs hvd-elastic), together with
            ``max_num_proc``: it keeps running with at least ``min_num_proc`` and at most
            ``max_num_proc`` ranks as hosts fail or are added (``min_np``/``max_np`` are
            Horovod's old spellings).
        max_num_proc: See ``min_num_proc``.
        host_discovery_script: Elastic: an executable printing the usable hosts (``host``
            or ``host:slots`` lines), run every second; without it, ``hosts``/``hostfile``
            are the fixed hosts of a fault-tolerant job.
        slots: Elastic: slots of a discovered host printed without ``:slots`` (default 1).
        reset_limit: Elastic: most resets before the job fails (default: no limit).
        cooldown_range: Elastic: (min, max) seconds a failed host stays blacklisted
            (default: for good).
        elastic_timeout: Elastic: seconds to wait for enough slots (default 600).

    Returns:
        The return values of ``func``, one per rank, in rank order (in an elastic job: the
        ranks of its last round).

    Raises:
        Exception: The exception a rank raised (the first rank to fail), with the
            remote traceback as its ``__cause__`` and the rank named in its notes.
        RuntimeError: A rank died without returning.
        KeyboardInterrupt: The launcher was interrupted.
        BadInputError: Bad arguments (a LaunchError).
        LaunchError: The job could not be started, e.g. hosts that cannot be reached.
    """
    import cloudpickle

    if unsupported:
        raise TypeError(f"run() got unexpected keyword arguments: {', '.join(sorted(unsupported))}")
    min_num_proc = min_num_proc if min_num_proc is not None else min_np
    max_num_proc = max_num_proc if max_num_proc is not None else max_np
    elastic = any(v is not None for v in (min_num_proc, max_num_proc, host_discovery_script))
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
    if elastic:
        num_proc = num_proc if num_proc is not None else min_num_proc
    if num_proc is None:
        num_proc = 1 if host_list is None else sum(h.slots for h in host_list)
    if host_list is None and not elastic:
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
    final_size = [num_proc]

    def store_function(server):
        server.put(FUNCTION_KEY, payload)

    def collect_results(server):
        if elastic:
            # The ranks of the last round (a replaced worker's failure may
            # have left a result under a rank that no longer exists).
            value = server.read(RESULT_SIZE_KEY)
            final_size[0] = int(value) if value else 0
        for key in range(final_size[0]):
            value = server.read(RESULT_KEY_PREFIX + str(key))
            if value is not None:  # None: the rank died before reporting.
                results[key] = cloudpickle.loads(value)

    if elastic:
        job = _run_elastic_function(settings, store_function, collect_results, min_num_proc, max_num_proc,
                                    host_discovery_script, slots, reset_limit, cooldown_range, elastic_timeout)
        num_proc = final_size[0]
    else:
        job = launch(settings, on_started=lambda server, *_: store_function(server),
                     on_finished=lambda server, *_: collect_results(server))
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


def _run_elastic_function(settings: LaunchSettings, on_started, on_finished, min_num_proc, max_num_proc,
                          host_discovery_script, slots, reset_limit, cooldown_range, elastic_timeout):
    try:
        from horovod.runner import elastic
    except ImportError:
        raise BadInputError("elastic horovod.run() (min_num_proc, max_num_proc, host_discovery_script) needs "
                            "the hvd-elastic package: pip install hvd-elastic") from None
    return elastic.run_elastic_function(settings, on_started, on_finished, min_num_proc=min_num_proc,
                                        max_num_proc=max_num_proc, host_discovery_script=host_discovery_script,
                                        slots=slots, reset_limit=reset_limit, cooldown_range=cooldown_range,
                                        elastic_timeout=elastic_timeout)
