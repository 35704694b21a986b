# functions.py - helpers that put every rank in the same state: variables
# (broadcast into place, or assigned from a broadcast, in eager mode and in
# tf.compat.v1 graph mode) and arbitrary picklable Python objects (hvd-core's
# object collectives, which need no TensorFlow op and so no session).
"""Broadcast and gather helpers for variables and Python objects."""

import tensorflow as tf

from horovod.common import collectives as _core_collectives
from horovod.tensorflow.mpi_ops import broadcast, broadcast_, global_process_set
from horovod.tensorflow.util import _as_tf_variable, _executing_eagerly, _make_subgraph

__all__ = ["broadcast_variables", "broadcast_object", "broadcast_object_fn", "allgather_object"]


def _broadcast_group(variables, root_rank, process_set):
    return tf.group(*[var.assign(broadcast(var, root_rank, process_set=process_set)) for var in variables])


def _broadcast_group_in_function(variables, root_rank, process_set):
    # A tf.function may not return an Operation; its assignments run anyway.
    _broadcast_group(variables, root_rank, process_set)


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Gives every rank of the process set (all ranks by default) the values that `root_rank`
    holds in `variables`.

    With `inplace=True` the broadcast writes straight into the variables' own buffers, sparing
    the temporary copies (and the memory fragmentation they cause); variables are then sent in
    one operation per device and dtype, so mixed dtypes are fine.

    Arguments:
        variables: the variables to overwrite with the root's values.
        root_rank: the rank whose values are sent to the others.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
        inplace: whether to broadcast into the variables in place.

    Returns:
        In tf.compat.v1 graph mode, the op that performs the broadcast; when executing
        eagerly the variables are updated at once and nothing useful is returned.
    """
    # Keras 3 variables are not tf.Variables; broadcast into the ones they hold.
    variables = [_as_tf_variable(v) for v in variables]
    if inplace:
        # One in-place op per (device, dtype): the op writes into the
        # variables' own buffers and carries a single dtype attribute.
        groups = {}
        for var in variables:
            groups.setdefault((var.device, var.dtype.base_dtype), []).append(var)
        values = []
        for (device, _), group in groups.items():
            with tf.device(device):
                out = broadcast_(group, root_rank, process_set=process_set)
            # broadcast_ returns the updated values (read after the op), so
            # grouping them gives graph mode one op to run.
            values.extend(out if isinstance(out, (list, tuple)) else [out])
        if _executing_eagerly():
            return None
        return tf.group(*[v for v in values if isinstance(v, (tf.Tensor, tf.Operation))])
    if _executing_eagerly():
        # One graph for all variables: the broadcasts run concurrently and
        # the engine can fuse them, instead of one blocking op at a time.
        return _make_subgraph(_broadcast_group_in_function)(variables, root_rank, process_set)
    return _broadcast_group(variables, root_rank, process_set)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Sends a picklable Python object from `root_rank` to every rank of the process set (all ranks
    by default) and returns it there.

    The object travels as bytes through hvd-core's engine directly (the one
    implementation every binding shares), not through TensorFlow ops, so no
    session is needed, in graph mode either.

    Arguments:
        obj: the object to send; it must survive a pickle round trip (cloudpickle is used
            when installed). Only the root's value matters.
        root_rank: the rank whose object is sent to the others.
        session: accepted for compatibility and unused: no TensorFlow op runs.
        name: optional name of the broadcast; "broadcast_object" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
    Returns:
        The root rank's object (on the root, `obj` itself).
    """
    # A fixed default name (not the object's type, as in Horovod): non-root
    # ranks often pass a placeholder such as None, and differing names would
    # never match up across ranks.
    return _core_collectives.broadcast_object(obj, root_rank, name=name or "broadcast_object",
                                              process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Builds a reusable function that sends a picklable Python object from `root_rank` to every
    rank of the process set (all ranks by default).

    The function adds nothing to any graph (the object goes through hvd-core's
    engine directly), so calling it repeatedly in TF1 graph mode does not grow
    the graph, and no session is needed.

    Arguments:
        root_rank: the rank whose object is sent to the others.
        session: accepted for compatibility and unused: no TensorFlow op runs.
        name: optional name of the broadcast; "broadcast_object_fn" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
    Returns:
        A function of one argument, the object, that returns the root rank's object.
    """
    name = name or "broadcast_object_fn"

    def _bcast(obj):
        return _core_collectives.broadcast_object(obj, root_rank, name=name, process_set=process_set)

    return _bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Collects a picklable Python object from every rank of the process set (all ranks by
    default).

    Like broadcast_object, the objects travel through hvd-core's engine
    directly, so no session is needed.

    Arguments:
        obj: this rank's object; it must survive a pickle round trip (cloudpickle is used
            when installed).
        session: accepted for compatibility and unused: no TensorFlow op runs.
        name: optional name of the allgather; "allgather_object" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A list of the ranks' objects, in rank order.
    """
    return _core_collectives.allgather_object(obj, name=name or "allgather_object", process_set=process_set)
