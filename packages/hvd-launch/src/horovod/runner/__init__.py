"""hvd's launcher: ``horovodrun``/``hvdrun``, ``horovod.run()`` and ``check_build()``.

``horovod.runner`` may be split across distributions (hvd-elastic adds
``horovod.runner.elastic``), so its ``__path__`` is extended like hvd-core's
``horovod`` package.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

try:
    from importlib.metadata import version as _distribution_version
    __version__ = _distribution_version("hvd-launch")
except Exception:  # Running from a source tree without installed metadata.
    __version__ = "0.1.0"

__all__ = ["run", "check_build", "__version__"]


def run(*args, **kwargs):
    """Runs a Python function on every rank; see :func:`horovod.runner.run_api.run`."""
    from horovod.runner.run_api import run as _run
    return _run(*args, **kwargs)


def check_build(verbose=False):
    """Prints and returns the available frameworks, controllers and tensor operations."""
    from horovod.runner.check_build import check_build as _check_build
    return _check_build(verbose=verbose)
