# optimizer_options.py - the checks and scale factors every binding's
# DistributedOptimizer (torch, TensorFlow, Keras, MXNet) applies to its
# options, written once so they agree.
"""Option checks and gradient scale factors shared by the DistributedOptimizers."""

import warnings

from horovod.common.basics import Average


def check_optimizer_options(op, gradient_predivide_factor, num_groups=0, groups=None):
    """Checks the options every DistributedOptimizer takes and returns the
    effective `groups`: the deprecated `num_groups` stands in for `groups`
    when only it is given (with a DeprecationWarning, as in Horovod).

    Raises ValueError for a predivide factor with an op other than Average,
    for a negative `num_groups`, or for `groups` that is neither a positive
    number of groups nor a list of lists.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or
                                   (isinstance(groups, int) and not isinstance(groups, bool) and groups > 0)):
        raise ValueError("groups should be a non-negative integer or a list of lists of tensors or "
                         "variables, got %r" % (groups,))
    return groups


def gradient_scale_factors(op, gradient_predivide_factor):
    """(prescale_factor, postscale_factor) for reducing gradients with `op`.

    The engine's Average divides the sum by the set's size. A predivide factor
    f moves part of that division before the sum: gradients are multiplied by
    1/f first and the sum by f afterwards (then divided by the size), which
    keeps float16 sums of many ranks from overflowing. Other ops are not scaled.
    """
    if op == Average:
        return 1.0 / gradient_predivide_factor, gradient_predivide_factor
    return 1.0, 1.0
