# exceptions.py - the exception classes Horovod users catch, with Horovod's
# names, plus the mapping from C ABI error codes to them.
"""Exceptions raised by hvd, named as Horovod names them."""

__all__ = [
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "HorovodCollectiveMismatchError",
    "HorovodUnsupportedError",
    "HorovodVersionMismatchError",
    "get_version_mismatch_message",
]


class HorovodInternalError(RuntimeError):
    """Raised when a collective (allreduce and the like) cannot complete.

    This happens when a peer process died, a connection broke, the job was shut
    down, or a stall exceeded HOROVOD_STALL_SHUTDOWN_TIME_SECONDS. Every pending
    and later collective fails the same way: call ``hvd.shutdown()`` and then
    ``hvd.init()`` again (elastic training does this for you).
    """


class HostsUpdatedInterrupt(RuntimeError):
    """Raised inside an elastic job to signal that hosts were added or removed.

    In elastic mode, this results in the current state being committed and
    training continuing on the new set of hosts.

    Args:
        skip_sync: If True, the state is not synchronised after the reset
            because no hosts were added.
    """

    def __init__(self, skip_sync=False):
        super().__init__()
        self.skip_sync = skip_sync


class HorovodCollectiveMismatchError(RuntimeError):
    """The ranks disagree about a collective: a different shape, dtype, operation,
    root rank, scale factor or process set for the same tensor name.

    Raised on every rank that took part, with a message naming the tensor and the
    ranks. The engine stays usable: later collectives work.
    """


class HorovodUnsupportedError(TypeError, NotImplementedError):
    """hvd cannot run this combination of dtype, operation and device (for
    example reducescatter with op=Adasum, or a complex tensor).

    Nothing was enqueued. It is a TypeError and a NotImplementedError (so a
    RuntimeError, which is what Horovod raises for such calls): ``except``
    clauses written for either keep working.
    """


class HorovodVersionMismatchError(ImportError):
    """The framework binding was built against a different framework version."""

    def __init__(self, name, version, built_version):
        super().__init__(get_version_mismatch_message(name, version, built_version))
        self.name = name
        self.version = version
        self.built_version = built_version


def get_version_mismatch_message(name, version, built_version):
    return ("Framework %s installed with version %s but found version %s.\n"
            "This can result in unexpected behavior including runtime errors.\n"
            "Reinstall the hvd package for %s to build against the installed version."
            % (name, built_version, version, name))
