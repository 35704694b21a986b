# util.py - helpers that Horovod's framework modules, test suites and
# integrations import from horovod.common.util, under Horovod's names: build
# and extension queries, an environment context manager, a memoizer, and the
# small list/version helpers the bindings share.
"""Helpers shared by the framework bindings, and Horovod's ``horovod.common.util`` names."""

import contextlib
import functools
import importlib
import importlib.util
import os
import warnings

__all__ = ["ccl_built", "cuda_built", "ddl_built", "env", "extension_available",
           "get_average_backwards_compatibility_fun", "gloo_built", "gpu_available", "is_iterable",
           "is_version_greater_equal_than", "mpi_built", "nccl_built", "num_rank_is_power_2", "rocm_built",
           "split_list"]

# The framework bindings Horovod's queries know by name: (binding module, framework module).
_EXTENSIONS = {"tensorflow": ("horovod.tensorflow", "tensorflow"), "torch": ("horovod.torch", "torch"),
               "mxnet": ("horovod.mxnet", "mxnet")}


def _cache(func):
    """Memoizes `func` on its arguments (positional and keyword); the values must be hashable."""
    results = {}

    @functools.wraps(func)
    def cached(*args, **kwargs):
        key = (args, frozenset(kwargs.items()))
        if key not in results:
            results[key] = func(*args, **kwargs)
        return results[key]

    return cached


@contextlib.contextmanager
def env(**variables):
    """Sets environment variables for the duration of a ``with`` block and restores them after.

    Arguments whose value is None are left alone.
    """
    variables = {name: value for name, value in variables.items() if value is not None}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _extension_modules(ext_base_name):
    try:
        return _EXTENSIONS[ext_base_name]
    except KeyError:
        raise ValueError("unknown extension %r; expected one of %s" % (ext_base_name, ", ".join(_EXTENSIONS)))


def extension_available(ext_base_name, verbose=False):
    """True when the hvd binding for `ext_base_name` ('tensorflow', 'torch', 'mxnet') and its
    framework are installed. Nothing is imported (a framework import is slow and has side effects)."""
    missing = [m for m in _extension_modules(ext_base_name) if importlib.util.find_spec(m) is None]
    if missing and verbose:
        print("Extension %s is not available: %s not installed" % (ext_base_name, ", ".join(missing)))
    return not missing


@_cache
def gpu_available(ext_base_name, verbose=False):
    """True when the binding imports and its framework sees a GPU hvd can serve.

    hvd-core moves host memory; CUDA tensors are staged through it, so this
    asks the framework whether CUDA is usable.
    """
    if not extension_available(ext_base_name, verbose):
        return False
    binding = importlib.import_module(_extension_modules(ext_base_name)[0])
    check = getattr(binding, "_check_has_gpu", None)
    return bool(check()) if check is not None else False


def _basics():
    from horovod.common import _basics
    return _basics


# Build queries: hvd-core is one build for every binding, so these answer
# for the core (see horovod.common.basics) whatever bindings are installed.
@_cache
def mpi_built(verbose=False):
    """True when an MPI library can be loaded for the MPI data plane (hvd never links MPI)."""
    return _basics().mpi_built()


@_cache
def gloo_built(verbose=False):
    """True: hvd's own controller and transports stand in for Gloo."""
    return _basics().gloo_built()


@_cache
def nccl_built(verbose=False):
    """The NCCL version hvd-core was built with, 0 without NCCL."""
    return _basics().nccl_built()


@_cache
def ddl_built(verbose=False):
    """False: DDL is not supported."""
    return _basics().ddl_built()


@_cache
def ccl_built(verbose=False):
    """False: oneCCL is not supported."""
    return _basics().ccl_built()


@_cache
def cuda_built(verbose=False):
    """Whether hvd-core was built with CUDA."""
    return _basics().cuda_built()


@_cache
def rocm_built(verbose=False):
    """False: ROCm is not supported."""
    return _basics().rocm_built()


def is_iterable(x):
    """True when `x` supports iteration."""
    try:
        iter(x)
    except TypeError:
        return False
    return True


def get_average_backwards_compatibility_fun(reduce_ops):
    """Returns a function resolving the deprecated ``average`` argument against ``op``.

    ``op`` supersedes ``average``; passing both is an error. With neither,
    the operation is Average.
    """
    def impl(op, average):
        if op is not None:
            if average is not None:
                raise ValueError("The op parameter supersedes average. Please provide only one of them.")
            return op
        if average is not None:
            warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                          DeprecationWarning)
            return reduce_ops.Average if average else reduce_ops.Sum
        return reduce_ops.Average

    return impl


def num_rank_is_power_2(num_rank):
    """True when num_rank is a positive power of two."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def split_list(items, num_parts):
    """Splits ``items`` into ``num_parts`` consecutive parts of near-equal length."""
    d, r = divmod(len(items), num_parts)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(num_parts)]


def _parse_version(version):
    # packaging's ordering (pre-releases before the release) when it is
    # installed; otherwise the numeric release part ("2.21.0+cpu" -> (2, 21, 0)).
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        import re
        match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
        if not match:
            raise ValueError("%r is not a version string" % (version,))
        release = tuple(int(x) for x in match.group(1).split("."))
        return release + (0,) * (8 - len(release))
    try:
        return Version(version)
    except InvalidVersion:
        raise ValueError("%r is not a version string" % (version,))


def is_version_greater_equal_than(ver, target):
    """True when version string `ver` is at least `target` (e.g. ("2.21.0", "2.16")).

    Raises:
        ValueError: either argument is not a version string.
    """
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError("is_version_greater_equal_than expects two version strings, got %r and %r"
                         % (ver, target))
    return _parse_version(ver) >= _parse_version(target)
