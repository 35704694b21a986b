"""Runs one MPI rank's command and prefixes its output lines with ``[rank]<stream>:``.

``horovodrun --mpi`` puts this between ``mpirun`` and the user's command so
MPI jobs print exactly like Gloo jobs, whichever MPI is installed:

    python -m horovod.runner.mpi_rank_output [--timestamp] [--output-dir DIR] -- CMD...

The rank comes from the MPI launcher's variables.  SIGTERM and SIGINT are
passed on to the command, and the command is told by the kernel to die if
this wrapper dies first, so mpirun tearing the job down leaves no orphans.
The exit status is the command's (128 + signal when it was killed).
"""

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HOROVOD_RANK")
_PR_SET_PDEATHSIG = 1


def mpi_rank(env=None) -> str:
    """Returns this process's rank from the MPI launcher's variables ('?' when none is set)."""
    env = os.environ if env is None else env
    for name in _RANK_VARIABLES:
        if env.get(name):
            return env[name]
    return "?"


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _pump(pipe, target, prefix: bytes, with_timestamp: bool, copy_path) -> None:
    copy = open(copy_path, "wb") if copy_path else None
    try:
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            if copy is not None:
                copy.write(line)
                copy.flush()
            stamp = time.strftime("%a %b %d %H:%M:%S %Y ").encode() if with_timestamp else b""
            target.write(stamp + prefix + line)
            target.flush()
    finally:
        if copy is not None:
            copy.close()


def _pmi_fds():
    # MPICH's Hydra hands each rank its PMI connection as an inherited socket
    # (PMI_FD); the rank is our child, so that descriptor must stay open for
    # it, or MPI_Init in the rank fails (the MPI data plane needs it).
    try:
        fd = int(os.environ.get("PMI_FD", ""))
        os.fstat(fd)
        return (fd,)
    except (ValueError, OSError):
        return ()


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    with_timestamp = False
    output_dir = None
    while args and args[0] != "--":
        option = args.pop(0)
        if option == "--timestamp":
            with_timestamp = True
        elif option == "--output-dir":
            output_dir = args.pop(0)
        else:
            sys.stderr.write(f"mpi_rank_output: unknown option {option}\n")
            return 2
    command = args[1:]
    # If the MPI process manager that started us dies without cleaning up,
    # take the rank down with it rather than leave it running.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    rank = mpi_rank()
    rank_dir = None
    if output_dir:
        rank_dir = os.path.join(output_dir, f"rank.{rank}")
        os.makedirs(rank_dir, exist_ok=True)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                             pass_fds=_pmi_fds())

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    threads = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout.buffer,
                                             f"[{rank}]<stdout>:".encode(), with_timestamp,
                                             rank_dir and os.path.join(rank_dir, "stdout"))),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr.buffer,
                                             f"[{rank}]<stderr>:".encode(), with_timestamp,
                                             rank_dir and os.path.join(rank_dir, "stderr"))),
    ]
    for thread in threads:
        thread.start()
    code = child.wait()
    exited_at = time.time()
    for thread in threads:
        thread.join()
    if code != 0:
        # mpirun reports only its own view of the failure; name the rank the
        # way local and ssh jobs do.
        how = f"exited with code {code}" if code > 0 else f"was killed by signal {-code}"
        sys.stderr.write(f"horovodrun: rank {rank} {how}\n")
        sys.stderr.flush()
        report_failure(rank, code, exited_at)
    return code if code >= 0 else 128 - code


FIRST_FAILURE_KEY = "hvd.launch/first_failure"
_FAILURE_COUNT_KEY = "hvd.launch/failures"
# The first rank killed by a signal: a rank that exits with an error is often
# only reacting to a killed peer, and may report before the peer's wrapper.
# Both values end with the time of the exit, so horovodrun can tell such a
# peer (killed earlier) from ranks mpirun itself stops afterwards.
FIRST_SIGNAL_DEATH_KEY = "hvd.launch/first_signal_death"
_SIGNAL_DEATH_COUNT_KEY = "hvd.launch/signal_deaths"


def report_failure(rank: str, code: int, when: float) -> None:
    """Tells horovodrun through the rendezvous store that this rank failed.

    MPICH's Hydra keeps the other ranks of a non-MPI program running after
    one fails, so horovodrun stops the job itself when it sees this.
    """
    try:
        from horovod.common.rendezvous import RendezvousClient
        client = RendezvousClient(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
                                  int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]),
                                  os.environ["HOROVOD_SECRET_KEY"], timeout=5)
        if code < 0 and client.add(_SIGNAL_DEATH_COUNT_KEY, 1) == 1:
            client.set(FIRST_SIGNAL_DEATH_KEY, f"{rank} {code} {when:.6f}")
        if client.add(_FAILURE_COUNT_KEY, 1) == 1:
            client.set(FIRST_FAILURE_KEY, f"{rank} {code} {when:.6f}")
    except Exception:  # No store (plain mpirun) or it is gone: mpirun's own handling remains.
        pass


if __name__ == "__main__":
    sys.exit(main())
