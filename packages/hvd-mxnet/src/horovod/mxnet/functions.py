# functions.py - training helpers over the collectives: parameters from the
# root rank (including Gluon parameters whose initialisation is deferred),
# and picklable objects, which travel through hvd-core's one implementation.
"""broadcast_parameters, broadcast_object and allgather_object for MXNet."""

import types

import mxnet as mx

from horovod.common import collectives as _np_collectives
from horovod.common.process_sets import global_process_set
from horovod.mxnet.mpi_ops import _as_mxnet_error, broadcast_, size


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Sends a picklable object from `root_rank` to every rank of `process_set` and returns it there.

    Returns:
        The root's object (on the root, `obj` itself).
    """
    return _as_mxnet_error(_np_collectives.broadcast_object, obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Collects a picklable object from every rank of `process_set`: a list in rank order, equal on every rank."""
    return _as_mxnet_error(_np_collectives.allgather_object, obj, name, process_set)


def _broadcast_after_init(param, root_rank, name):
    """Makes `param`'s deferred initialisation end with a broadcast from `root_rank`."""
    init_impl = param._init_impl

    def init_then_broadcast(self, *args, **kwargs):
        init_impl(*args, **kwargs)
        broadcast_(self.data(), root_rank=root_rank, name=name)

    param._init_impl = types.MethodType(init_then_broadcast, param)


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Overwrites every rank's parameters with `root_rank`'s.

    Args:
        params: a dict of NDArrays (e.g. Module.get_params()'s) or Gluon
            Parameters, or a Gluon ParameterDict (Block.collect_params()).
            A Gluon Parameter whose initialisation is deferred is broadcast
            right after it is initialised.
        root_rank: the rank whose values everyone gets.
        prefix: prepended to the tensor names; give each call a different one
            when a program broadcasts several sets of parameters.

    Raises:
        ValueError: `params` is not one of the types above.
    """
    if size() == 1:
        return
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError("prefix must be a str or None, got %s" % type(prefix).__name__)
    prefix = prefix or ""
    valid_types = (dict,)
    try:
        from mxnet.gluon.parameter import ParameterDict
        valid_types = (dict, ParameterDict)
    except ImportError:  # MXNet 2 has no ParameterDict
        pass
    if not isinstance(params, valid_types):
        raise ValueError("invalid params of type: %s" % type(params))
    tensors = []
    for name, p in sorted(params.items()):
        full_name = prefix + str(name)
        if isinstance(p, mx.gluon.parameter.Parameter):
            try:
                tensors.append((p.data(), full_name))
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_init(p, root_rank, full_name)
        else:
            tensors.append((p, full_name))
    for tensor, full_name in tensors:
        broadcast_(tensor, root_rank, name=full_name)
