# util.py - small helpers Horovod's framework modules import from
# horovod.common.util, kept under the same names.
"""Helpers shared by the framework bindings."""

import warnings

__all__ = ["get_average_backwards_compatibility_fun", "is_version_greater_equal_than", "num_rank_is_power_2",
           "split_list"]


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
