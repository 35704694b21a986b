# horovod/__init__.py - the import root shared by every hvd distribution.
# Only hvd-core ships this file; hvd-torch, hvd-tensorflow, hvd-launch, ...
# add their subpackages (horovod.torch, horovod.runner, ...) to the same
# namespace, also when installed editable from separate source folders.
"""hvd: a drop-in successor to Horovod."""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"


def __getattr__(name):
    # horovod.run comes from hvd-launch; import it only when asked for, so
    # `import horovod` stays cheap and works without the launcher installed.
    if name == "run":
        try:
            from horovod.runner import run
        except ImportError as e:
            raise ImportError("horovod.run needs the launcher: pip install hvd-launch") from e
        return run
    raise AttributeError("module 'horovod' has no attribute %r" % name)
