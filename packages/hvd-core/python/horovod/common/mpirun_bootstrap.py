# mpirun_bootstrap.py - lets `mpirun -np N python train.py` work without
# horovodrun on one host. mpirun gives each process its rank but no
# rendezvous store or job secret, so rank 0 starts the store itself and
# hands its address and a fresh secret to the other ranks through a file
# only this user can read, named after the launcher process that every rank
# of this job shares as its parent.
"""Bootstrap of hvd jobs started by a plain mpirun (Open MPI or MPICH) on one host."""

import json
import os
import time

__all__ = ["bootstrap_from_mpirun"]

_server = None  # rank 0's store; lives as long as the process (re-init reuses it)


def _first_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value:
            return int(value)
    return None


def _process_start_time(pid):
    """The start time of `pid` in clock ticks (field 22 of /proc/pid/stat):
    with the pid it names one process, even after pid reuse."""
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    return stat.rsplit(")", 1)[1].split()[19]


def _exchange_file():
    parent = os.getppid()
    directory = os.environ.get("TMPDIR", "/tmp")
    return os.path.join(directory, "hvd-mpirun-%d-%d-%s.json" % (os.getuid(), parent, _process_start_time(parent)))


def bootstrap_from_mpirun():
    """Sets HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT and HOROVOD_SECRET_KEY for a job
    that a plain mpirun started; does nothing under horovodrun or outside MPI.

    Raises:
        ValueError: the job spans several hosts (use ``horovodrun --mpi``), or
            rank 0 did not publish the store in time.
    """
    if os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or os.environ.get("HOROVOD_RANK"):
        return
    size = _first_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    rank = _first_int("OMPI_COMM_WORLD_RANK", "PMI_RANK")
    if size is None or rank is None or size <= 1:
        return
    local_size = _first_int("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
    if local_size is not None and local_size != size:
        raise ValueError("this job was started by mpirun across several hosts without horovodrun; hvd needs its "
                         "rendezvous store there: launch it with `horovodrun --mpi -np %d -H ... python ...`" % size)
    from horovod.common.rendezvous import RendezvousServer, make_secret
    path = _exchange_file()
    global _server
    if rank == 0:
        if _server is None:
            secret = make_secret()
            _server = RendezvousServer(secret, host="127.0.0.1")
            port = _server.start()
            tmp = path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"port": port, "secret": secret}, f)
            os.rename(tmp, path)  # readers never see a partial file
            import atexit
            atexit.register(lambda: os.path.exists(path) and os.unlink(path))
            _server.published = {"port": port, "secret": secret}
        info = _server.published
    else:
        timeout = float(os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "30"))
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise ValueError("rank %d: rank 0 of this mpirun job did not publish hvd's rendezvous store at %s "
                                 "within %s s (HOROVOD_GLOO_TIMEOUT_SECONDS)" % (rank, path, timeout))
            time.sleep(0.01)
        with open(path) as f:
            info = json.load(f)
    os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = "127.0.0.1"
    os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"] = str(info["port"])
    os.environ["HOROVOD_SECRET_KEY"] = info["secret"]
