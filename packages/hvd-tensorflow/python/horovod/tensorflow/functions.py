# functions.py - helpers that put every rank in the same state: variables
# (broadcast into place, or assigned from a broadcast) and arbitrary
# picklable Python objects (serialized to uint8 tensors), in eager mode and
# in tf.compat.v1 graph mode (where results come from a session).
"""Broadcast and gather helpers for variables and Python objects."""

import io

import numpy as np
import tensorflow as tf

from horovod.tensorflow.mpi_ops import allgather, broadcast, broadcast_, global_process_set, rank
from horovod.tensorflow.util import _as_tf_variable, _executing_eagerly, _make_subgraph

try:
    # cloudpickle also handles lambdas and locally defined classes, which
    # users do put in broadcast checkpoints; plain pickle is the fallback.
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - cloudpickle ships with TF's venvs here
    import pickle as _pickle

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


def _to_numpy(value, session):
    if _executing_eagerly():
        return value.numpy()
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError("in graph mode, pass session= or call this inside a default session "
                         "(`with tf.compat.v1.Session() as session:`)")
    return session.run(value)


def _serialize(obj):
    buf = io.BytesIO()
    _pickle.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Sends a picklable Python object from `root_rank` to every rank of the process set (all ranks
    by default) and returns it there.

    Arguments:
        obj: the object to send; it must survive a pickle round trip (cloudpickle is used
            when installed). Only the root's value matters.
        root_rank: the rank whose object is sent to the others.
        session: in tf.compat.v1 graph mode, the session that runs the broadcast (the
            default session when omitted).
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
    name = name or "broadcast_object"
    is_root = rank() == root_rank
    if is_root:
        payload = _serialize(obj)
        length = tf.constant([payload.size], dtype=tf.int64)
    else:
        length = tf.constant([0], dtype=tf.int64)
    length = int(_to_numpy(broadcast(length, root_rank, name + ".sz", process_set=process_set), session)[0])
    data = tf.constant(payload) if is_root else tf.zeros([length], dtype=tf.uint8)
    data = _to_numpy(broadcast(data, root_rank, name + ".t", process_set=process_set), session)
    if is_root:
        return obj
    return _pickle.loads(data.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Builds a reusable function that sends a picklable Python object from `root_rank` to every
    rank of the process set (all ranks by default).

    The graph (placeholders and broadcast ops) is built once, here, so calling
    the returned function repeatedly in TF1 graph mode does not grow the graph.

    Arguments:
        root_rank: the rank whose object is sent to the others.
        session: in tf.compat.v1 graph mode, the session that runs the broadcast (the
            default session when omitted).
        name: optional name of the broadcast; "broadcast_object_fn" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
    Returns:
        A function of one argument, the object, that returns the root rank's object.
    """
    name = name or "broadcast_object_fn"
    if _executing_eagerly():
        # Eager mode builds nothing ahead of time.
        return lambda obj: broadcast_object(obj, root_rank, name=name, process_set=process_set)

    length_in = tf.compat.v1.placeholder(tf.int64, [1], name="bcast_object_size")
    length_out = broadcast(length_in, root_rank, name + ".sz", process_set=process_set)
    data_in = tf.compat.v1.placeholder(tf.uint8, [None], name="bcast_object_data")
    data_out = broadcast(data_in, root_rank, name + ".t", process_set=process_set)

    def _bcast(obj):
        sess = session or tf.compat.v1.get_default_session()
        is_root = rank() == root_rank
        payload = _serialize(obj) if is_root else None
        length = sess.run(length_out, feed_dict={length_in: [payload.size if is_root else 0]})
        data = sess.run(data_out, feed_dict={data_in: payload if is_root else np.zeros(int(length[0]), np.uint8)})
        return obj if is_root else _pickle.loads(data.tobytes())

    return _bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Collects a picklable Python object from every rank of the process set (all ranks by
    default).

    Arguments:
        obj: this rank's object; it must survive a pickle round trip (cloudpickle is used
            when installed).
        session: in tf.compat.v1 graph mode, the session that runs the allgather (the
            default session when omitted).
        name: optional name of the allgather; "allgather_object" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A list of the ranks' objects, in rank order.
    """
    name = name or "allgather_object"
    payload = _serialize(obj)
    sizes = _to_numpy(allgather(tf.constant([payload.size], dtype=tf.int64), name=name + ".sz",
                                process_set=process_set), session)
    data = _to_numpy(allgather(tf.constant(payload), name=name + ".t", process_set=process_set), session)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(_pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out
