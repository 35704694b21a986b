"""hvd's launcher: ``horovodrun``/``hvdrun``, ``horovod.run()`` and ``check_build()``.

``horovod.runner`` may be split across distributions (hvd-elastic adds
``horovod.runner.elastic``), so its ``__path__`` is extended like hvd-core's
``horovod`` package.
"""

# Spelled this way (not `from pkgutil import extend_path`) so that static readers
# such as griffe, which builds the API reference, see the namespace too.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

try:
    from importlib.metadata import version as _distribution_version
    __version__ = _distribution_version("hvd-launch")
except Exception:  # Running from a source tree without installed metadata.
    __version__ = "0.1.0"

__all__ = ["run", "check_build", "__version__"]


class _HorovodArgs:
    """Horovod's bag of launcher arguments, for code that fills one and passes it to
    ``horovod.runner.launch._run``: every horovodrun option as an attribute (None when
    unset; ``num_proc`` 1), plus Horovod's own names (``run_func``, ``nics``, ``slots``,
    ``log_with_timestamp``, ``executable``)."""

    def __init__(self):
        from horovod.runner.launch import build_parser
        for action in build_parser()._actions:
            if action.dest not in ("help", "command"):
                setattr(self, action.dest, None)
        self.num_proc = 1
        self.command = None
        for name in ("run_func", "nics", "nic", "slots", "log_with_timestamp", "executable"):
            setattr(self, name, None)


def run(*args, **kwargs):
    """Runs a Python function on every rank; see :func:`horovod.runner.run_api.run`."""
    from horovod.runner.run_api import run as _run
    return _run(*args, **kwargs)


def check_build(verbose=False):
    """Prints and returns the available frameworks, controllers and tensor operations."""
    from horovod.runner.check_build import check_build as _check_build
    return _check_build(verbose=verbose)
