# util.py - small helpers Horovod's framework modules import from
# horovod.common.util, kept under the same names.
"""Helpers shared by the framework bindings."""

import warnings

__all__ = ["get_average_backwards_compatibility_fun", "num_rank_is_power_2", "split_list"]


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
