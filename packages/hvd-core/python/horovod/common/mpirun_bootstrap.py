# mpirun_bootstrap.py - lets a plain MPI launcher (`mpirun -np 8 -H a:4,b:4
# python train.py` with Open MPI or MPICH, Slurm's `srun --mpi=pmix`, the
# Kubeflow MPI Operator) start hvd jobs without horovodrun. The launcher gives
# each process a rank but no rendezvous store or job secret: rank 0 starts the
# store, and MPI itself carries the store's addresses and a fresh secret to
# every rank (a broadcast over MPI_COMM_WORLD), so nothing touches the disk.
# Without an MPI library to load, ranks on one host fall back to a file only
# this user can read.
"""Bootstrap of hvd jobs started by a plain MPI launcher, on one host or several."""

import atexit
import ctypes
import errno
import json
import os
import socket
import stat
import time

__all__ = ["bootstrap_from_mpirun"]

_published = None  # (addr, port, secret, rank, size) found by the first init; re-inits reuse it
_server = None  # rank 0's store: it lives as long as the process


def _first_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value:
            return int(value)
    return None


def _launcher_rank_and_size():
    """(rank, size) as the MPI launcher set them; size may be None (PMIx names no size)."""
    rank = _first_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
    size = _first_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    return rank, size


class _Mpi:
    """The MPI calls the bootstrap makes, through ctypes: Open MPI's ABI (a
    predefined handle is the address of a global object) or MPICH's (fixed
    integer handles), told apart as the engine's MPI backend does."""

    _THREAD_MULTIPLE = 3  # the same in both ABIs

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        if hasattr(self.lib, "ompi_mpi_comm_world"):
            handle = ctypes.c_void_p
            self.comm_world = handle(ctypes.addressof(ctypes.c_char.in_dll(self.lib, "ompi_mpi_comm_world")))
            self.byte = handle(ctypes.addressof(ctypes.c_char.in_dll(self.lib, "ompi_mpi_byte")))
        else:
            handle = ctypes.c_int
            self.comm_world, self.byte = handle(0x44000000), handle(0x4c00010d)
        c_int, ptr, int_ptr = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)
        for name, argtypes in (("MPI_Initialized", [int_ptr]), ("MPI_Finalized", [int_ptr]),
                               ("MPI_Init_thread", [ptr, ptr, c_int, int_ptr]), ("MPI_Finalize", []),
                               ("MPI_Comm_rank", [handle, int_ptr]), ("MPI_Comm_size", [handle, int_ptr]),
                               ("MPI_Bcast", [ptr, c_int, handle, c_int, handle]),
                               ("MPI_Allgather", [ptr, c_int, handle, ptr, c_int, handle, handle])):
            function = getattr(self.lib, name)
            function.argtypes, function.restype = argtypes, c_int

    def _call(self, name, *args):
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise RuntimeError("%s failed with MPI error %d (MPI library %s)" % (name, code, self.path))

    def _int(self, name, *args):
        out = ctypes.c_int()
        self._call(name, *args, ctypes.byref(out))
        return out.value

    def start(self):
        """Initialises MPI unless the program did (mpi4py, say); finalises it at exit if it was us."""
        if self._int("MPI_Initialized"):
            return
        provided = ctypes.c_int()
        self._call("MPI_Init_thread", None, None, self._THREAD_MULTIPLE, ctypes.byref(provided))

        def finalize():  # registered before hvd.shutdown's handler, so it runs after it
            if not self._int("MPI_Finalized"):
                self.lib.MPI_Finalize()

        atexit.register(finalize)

    def rank_and_size(self):
        return self._int("MPI_Comm_rank", self.comm_world), self._int("MPI_Comm_size", self.comm_world)

    def allgather_text(self, text, size, width=256):
        mine = ctypes.create_string_buffer(text.encode()[:width - 1], width)
        everyone = ctypes.create_string_buffer(width * size)
        self._call("MPI_Allgather", mine, width, self.byte, everyone, width, self.byte, self.comm_world)
        raw = everyone.raw
        return [raw[i * width:(i + 1) * width].split(b"\0", 1)[0].decode() for i in range(size)]

    def broadcast_bytes(self, payload, root=0):
        length = ctypes.c_int(len(payload))
        self._call("MPI_Bcast", ctypes.byref(length), ctypes.sizeof(length), self.byte, root, self.comm_world)
        buf = ctypes.create_string_buffer(payload, length.value)
        self._call("MPI_Bcast", buf, length.value, self.byte, root, self.comm_world)
        return buf.raw


def _load_mpi():
    """The job's MPI library, or None when none can be found."""
    from horovod.common.basics import _find_mpi_library
    path = _find_mpi_library()
    if path is None:
        return None
    try:
        return _Mpi(path)
    except OSError as e:
        raise ValueError("cannot load the MPI library %s to start this mpirun job: %s (set HVD_MPI_LIBRARY to the "
                         "libmpi of the MPI whose mpirun started the job)" % (path, e)) from None


def _store_addresses():
    """Where rank 0's store can be reached from other hosts: HOROVOD_GLOO_IFACE's address when set, else
    every address of this host."""
    from horovod.common.network_interfaces import interface_ipv4_address, local_ipv4_addresses
    iface = os.environ.get("HOROVOD_GLOO_IFACE")
    if iface:
        address = interface_ipv4_address(iface)
        if address is None:
            raise ValueError("HOROVOD_GLOO_IFACE=%s: this host (%s) has no such interface with an IPv4 address"
                             % (iface, socket.gethostname()))
        return [address]
    return local_ipv4_addresses()


def _reachable(address, port):
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


def _agreed_address(mpi, info, hosts, rank):
    """The first of rank 0's addresses that every rank on another host reached.

    Probed, not guessed: each rank off rank 0's host tries every candidate,
    and all ranks settle on one that works from everywhere (an address like a
    docker0 bridge also exists on the other hosts, and leads nowhere there).
    """
    candidates, port = info["addresses"], info["port"]
    mine = "".join("1" if hosts[rank] == hosts[0] or _reachable(a, port) else "0" for a in candidates)
    everyone = mpi.allgather_text(mine, len(hosts))
    for i, address in enumerate(candidates):
        if all(bits[i] == "1" for bits in everyone):
            return address
    blind = sorted({hosts[r] for r, bits in enumerate(everyone) if "1" not in bits})
    raise ValueError("the hosts of this mpirun job cannot all reach the rendezvous store that rank 0 started on %s "
                     "(addresses %s, port %d; %s reach none of them); name the network to use with "
                     "HOROVOD_GLOO_IFACE, or start the job with horovodrun"
                     % (hosts[0], ", ".join(candidates), port, ", ".join(blind) or "no single host"))


def _exchange_over_mpi(mpi, launcher_size):
    mpi.start()
    rank, size = mpi.rank_and_size()
    if launcher_size is not None and size != launcher_size:
        raise ValueError("the MPI library %s sees %d process(es), but the launcher started %d: it is not the MPI of "
                         "the mpirun that started this job; set HVD_MPI_LIBRARY to that MPI's libmpi"
                         % (mpi.path, size, launcher_size))
    hosts = mpi.allgather_text(socket.gethostname(), size)
    one_host = len(set(hosts)) == 1
    global _server
    payload = b""
    if rank == 0:
        from horovod.common.rendezvous import RendezvousServer, make_secret
        secret = make_secret()
        # Several hosts: the store must answer on the addresses other hosts reach.
        _server = RendezvousServer(secret, host="127.0.0.1" if one_host else "0.0.0.0")
        port = _server.start()
        addresses = ["127.0.0.1"] if one_host else _store_addresses()
        payload = json.dumps({"port": port, "secret": secret, "addresses": addresses}).encode()
    info = json.loads(mpi.broadcast_bytes(payload).decode())
    # Every rank (rank 0 too) dials the same address; the engine advertises the
    # address that routes there, which peers on other hosts reach as well.
    address = info["addresses"][0] if one_host else _agreed_address(mpi, info, hosts, rank)
    return address, info["port"], info["secret"], rank, size


def _start_time(pid):
    """The start time of process `pid` (clock ticks after boot, as text), or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _exchange_file(parent=None):
    # Named after the launcher process every rank shares as its parent (pid
    # and start time: unique even after pid reuse), so a file left by a killed
    # job is never taken for this one's.
    parent = parent or os.getppid()
    directory = os.environ.get("TMPDIR", "/tmp")
    return os.path.join(directory, "hvd-mpirun-%d-%d-%s.json" % (os.getuid(), parent, _start_time(parent)))


# A file younger than this is never removed as stale: its job may still be
# starting, in a PID namespace where its launcher's pid means nothing to us.
STALE_EXCHANGE_FILE_SECONDS = 120


def _remove_stale_exchange_files(directory):
    """Removes this user's exchange files whose launcher is gone.

    Rank 0 removes its file at exit, but not when it is killed; the next job's
    rank 0 clears what such jobs left: plain files of this user, older than
    STALE_EXCHANGE_FILE_SECONDS, whose launcher pid is gone or now belongs to
    a process started at another time. Returns the names removed.
    """
    prefix = "hvd-mpirun-%d-" % os.getuid()
    removed = []
    for name in os.listdir(directory):
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        pid_text, _, started = name[len(prefix):-len(".json")].partition("-")
        if not pid_text.isdigit():
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                or time.time() - st.st_mtime < STALE_EXCHANGE_FILE_SECONDS
                or _start_time(int(pid_text)) == started):
            continue
        try:
            os.unlink(path)
            removed.append(name)
        except OSError:
            pass
    return removed


def _read_private_file(path):
    """The JSON in `path`, if this user owns it and nobody else can read or write it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise ValueError("%s is a symbolic link: refusing to take a job secret from it" % path) from None
    with os.fdopen(fd) as f:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise ValueError("%s is not private to this user (owner %d, mode %o): refusing to take a job secret "
                             "from it" % (path, st.st_uid, stat.S_IMODE(st.st_mode)))
        return json.load(f)


def _exchange_through_a_file(rank, size):
    local_size = _first_int("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
    if local_size is not None and local_size != size:
        raise ValueError("this mpirun job spans several hosts, and no MPI library was found to start hvd through: "
                         "set HVD_MPI_LIBRARY to the libmpi of the MPI that started the job, or launch it with "
                         "`horovodrun --mpi -np %d -H ... python ...`" % size)
    path = _exchange_file()
    global _server
    if rank == 0:
        from horovod.common.rendezvous import RendezvousServer, make_secret
        secret = make_secret()
        _server = RendezvousServer(secret, host="127.0.0.1")
        port = _server.start()
        _remove_stale_exchange_files(os.path.dirname(path))
        # O_EXCL and O_NOFOLLOW: never write through a name another user planted.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            raise ValueError("cannot publish hvd's rendezvous store in %s: something is there already (planted by "
                             "another user?); remove it, or set TMPDIR to a private directory" % path) from None
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
        with os.fdopen(fd, "w") as f:
            json.dump({"port": port, "secret": secret}, f)
        return "127.0.0.1", port, secret, rank, size
    timeout = float(os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "30"))
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = _read_private_file(path)
            break
        except (FileNotFoundError, json.JSONDecodeError):  # not there yet, or half written
            if time.monotonic() > deadline:
                raise ValueError("rank %d: rank 0 of this mpirun job did not publish hvd's rendezvous store at %s "
                                 "within %s s (HOROVOD_GLOO_TIMEOUT_SECONDS)" % (rank, path, timeout)) from None
            time.sleep(0.01)
    return "127.0.0.1", info["port"], info["secret"], rank, size


def bootstrap_from_mpirun():
    """Sets HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT and HOROVOD_SECRET_KEY for a job
    a plain MPI launcher started; does nothing under horovodrun or outside MPI.
    Collective over the job's ranks the first time; later calls (re-init)
    reuse its answer.

    Raises:
        ValueError: the MPI library cannot be loaded or does not belong to
            the launcher, a rank cannot reach the store, or (without MPI)
            the job spans several hosts.
    """
    global _published
    if os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or os.environ.get("HOROVOD_RANK"):
        return
    if _published is None:
        rank, size = _launcher_rank_and_size()
        if rank is None or size == 1:
            return
        mpi = _load_mpi()
        if mpi is not None:
            _published = _exchange_over_mpi(mpi, size)
        elif size is None:
            raise ValueError("this job was started by a PMIx launcher (srun --mpi=pmix?), which does not say how "
                             "many processes it started, and no MPI library was found to ask: set HVD_MPI_LIBRARY "
                             "to the path of libmpi")
        else:
            _published = _exchange_through_a_file(rank, size)
    address, port, secret, rank, size = _published
    os.environ.update({"HOROVOD_GLOO_RENDEZVOUS_ADDR": address, "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
                       "HOROVOD_SECRET_KEY": secret})
    if _launcher_rank_and_size()[1] is None:
        # A PMIx launcher names no size for the engine to read. (HOROVOD_RANK is
        # left unset otherwise: scripts read it to tell horovodrun's Gloo mode.)
        os.environ.update({"HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size)})
