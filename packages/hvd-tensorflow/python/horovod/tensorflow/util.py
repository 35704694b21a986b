# util.py - small TensorFlow helpers shared by horovod.tensorflow's modules
# and by horovod.tensorflow.keras / horovod._keras, under Horovod's names
# (_executing_eagerly, _make_subgraph, _cache, vars_to_refs, refs_to_vars).
"""TensorFlow helpers for horovod.tensorflow."""

import functools

import tensorflow as tf

__all__ = ["_executing_eagerly", "_make_subgraph", "_cache", "vars_to_refs", "refs_to_vars", "_as_tf_variable",
           "_var_ref"]


def _executing_eagerly():
    """True when ops run immediately (TF2 eager), False while a graph is built
    (tf.function tracing, tf.compat.v1 graph mode)."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """Wraps `f` in a tf.function.

    In eager mode every collective op would run, and block, one after the
    other; inside one function graph TF starts all of them at once, so the
    engine sees the whole batch of tensors together and can fuse them.
    """
    return tf.function(f, reduce_retracing=True)


def _cache(f):
    """Memoizes `f` on its (hashable) positional and keyword arguments.

    Used for functions that build tf.functions: building a new one per call
    would retrace (and rebuild the graph) on every training step.
    """
    cache = {}

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = f(*args, **kwargs)
        return cache[key]

    wrapper.cache_clear = cache.clear
    return wrapper


def _as_tf_variable(var):
    """The tf.Variable behind `var`: Keras 3 variables are not tf.Variables (no
    ref(), and tf.function turns them into plain tensors) but hold one."""
    if isinstance(var, tf.Variable):
        return var
    inner = getattr(var, "_value", None)
    return inner if isinstance(inner, tf.Variable) else var


def _var_ref(var):
    """A hashable key for a variable or tensor (tf or Keras 3), equal for the same variable."""
    return _as_tf_variable(var).ref()


def vars_to_refs(vars):
    """Turns a (nested) list of variables into hashable tuples of `Variable.ref()`."""
    if isinstance(vars, (list, tuple)):
        return tuple(vars_to_refs(v) for v in vars)
    return _var_ref(vars)


def refs_to_vars(refs):
    """Inverse of vars_to_refs(): tuples of references back to lists of variables."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
