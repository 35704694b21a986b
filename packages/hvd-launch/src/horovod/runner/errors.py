"""Errors the launcher raises for problems it can name before or during a job.

Every message says what was wrong and what to do about it; ``horovodrun``
prints the message alone (no traceback) and exits with status 2 for bad
input and 1 for a job that could not be started.
"""


class LaunchError(Exception):
    """Base class: the job could not be started or was stopped by the launcher."""

    exit_code = 1


class BadInputError(LaunchError, ValueError):
    """The command line, host list, host file or config file is invalid."""

    exit_code = 2


class HostUnreachableError(LaunchError):
    """A remote host could not be reached over ssh within the start timeout."""


class MpiNotFoundError(LaunchError):
    """``--mpi`` was requested but no usable ``mpirun`` is on PATH."""


class ElasticNotInstalledError(LaunchError):
    """Elastic flags were given but the hvd-elastic package is not installed."""

    exit_code = 2
