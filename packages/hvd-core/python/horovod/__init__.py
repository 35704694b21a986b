# horovod/__init__.py - the import root shared by every hvd distribution.
# Only hvd-core ships this file; hvd-torch, hvd-tensorflow, hvd-launch, ...
# add their subpackages (horovod.torch, horovod.runner, ...) to the same
# namespace, also when installed editable from separate source folders.
"""hvd: a drop-in successor to Horovod."""

# Spelled this way (not `from pkgutil import extend_path`) so that static readers
# such as griffe, which builds the API reference, see the namespace too.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

# The Horovod release whose API hvd implements. horovod.__version__ is that
# release with hvd's own version as a PEP 440 local label ("0.28.1+hvd.0.1.0"):
# "Horovod >= 0.21"-style gates compare the public part and pass, and the
# label still says which hvd this is. hvd-core's wheel also registers this
# version under the distribution name "horovod" (docs/compatibility.md).
HOROVOD_API_VERSION = "0.28.1"


def _hvd_version():
    try:
        from importlib.metadata import version
        return version("hvd-core")
    except Exception:  # a source tree without installed metadata
        return "0.dev0"


def _horovod_distributions():
    """Horovod's own distributions installed on sys.path, as (version, location).

    hvd-core records a distribution named "horovod" of its own (version
    "<api>+hvd.<ours>", see above); any other is Horovod itself, whose files
    share this `horovod/` directory with hvd's and overwrite them.
    """
    from importlib.metadata import distributions
    found = []
    # name= makes the finder read only the records named like "horovod".
    for dist in distributions(name="horovod"):
        try:
            version = dist.version or ""
            where = str(dist.locate_file(""))
        except Exception:  # an unreadable record is not ours to judge
            continue
        if "+hvd." not in version:
            found.append((version, where))
    return found


def _refuse_mixed_install():
    import os
    if os.environ.get("HVD_ALLOW_HOROVOD_DISTRIBUTION") == "1":
        return
    found = _horovod_distributions()
    if not found:
        return
    version, where = found[0]
    raise ImportError(
        "Horovod %s is installed (%s) in the same environment as hvd. Both install the `horovod` "
        "Python package, so their files overwrite each other and `import horovod` would run a mix "
        "of the two. Remove Horovod and reinstall the hvd packages:\n"
        "    pip uninstall -y horovod\n"
        "    pip install --force-reinstall --no-deps hvd-core hvd-launch  # plus hvd-torch, hvd-tensorflow, ...\n"
        "See docs/migrating.md (\"Migrating from Horovod\"). Set HVD_ALLOW_HOROVOD_DISTRIBUTION=1 to "
        "import anyway." % (version, where or "location unknown"))


_refuse_mixed_install()

__hvd_version__ = _hvd_version()
__version__ = "%s+hvd.%s" % (HOROVOD_API_VERSION, __hvd_version__)


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
