# _keras/__init__.py - the Keras half of hvd-tensorflow, shared by
# horovod.tensorflow.keras (whatever tf.keras is: Keras 3 or tf-keras) and
# horovod.keras (standalone Keras 3). Each public module passes its own
# `keras` module in. Owns DistributedOptimizer (a class made on the fly that
# derives from the wrapped optimizer's class and averages gradients where the
# optimizer applies them), load_model's re-wrapping and the value-level
# collectives.
"""Shared implementation of horovod.tensorflow.keras and horovod.keras."""


import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from horovod.common.optimizer_options import check_optimizer_options, gradient_scale_factors
from horovod.common.util import split_list
from horovod.tensorflow.mpi_ops import Adasum, Average, global_process_set

# The two optimizer families this module knows how to wrap. They differ in
# where a train step hands gradients over: Keras 3 funnels apply_gradients()
# into apply(); tf-keras' optimizers (both generations) take them in
# apply_gradients(), which minimize() and Model.train_step call.
KERAS3 = "keras3"
TF_KERAS = "tf_keras"


def optimizer_family(optimizer):
    """Which optimizer family `optimizer` belongs to (KERAS3 or TF_KERAS)."""
    for klass in type(optimizer).__mro__:
        where = (klass.__module__ or "", klass.__name__)
        if where == ("keras.src.optimizers.base_optimizer", "BaseOptimizer"):
            return KERAS3
        if where[0].startswith("tf_keras.") and where[1] in ("OptimizerV2", "_BaseOptimizer"):
            return TF_KERAS
    # Unknown bases (another Keras build): judge by the methods they have.
    if hasattr(optimizer, "_backend_apply_gradients"):
        return KERAS3
    if hasattr(optimizer, "apply_gradients"):
        return TF_KERAS
    raise ValueError("hvd.DistributedOptimizer: %r is not a Keras optimizer" % (optimizer,))


class _GradientReducer:
    """Averages (or accumulates, then averages) gradients for one optimizer.

    A plain object on purpose: Keras' and TF's attribute tracking ignore it,
    so the wrapped optimizer saves, restores and serializes exactly like the
    optimizer it wraps (the accumulators of backward_passes_per_step > 1 are
    not part of checkpoints: they are zero at every apply boundary).
    """

    def __init__(self, name, device_dense, device_sparse, compression, sparse_as_dense,
                 gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
                 groups, process_set, scale_local_gradients):
        self.name = name
        self.device_dense = device_dense
        self.device_sparse = device_sparse
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.groups = groups
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.local_vars = {}      # id(variable) -> variable (kept alive so ids stay unique)
        self._accumulators = {}   # id(variable) -> tf.Variable, backward_passes_per_step > 1 only
        self._counter = None
        self._eager_reduce = None
        self._pre_reduced = None  # gradients _compute_gradients() already reduced, until applied

    @property
    def counter(self):
        """Backward passes accumulated so far in this cycle (a tf.Variable; None before the first)."""
        return self._counter

    # -- communication -----------------------------------------------------------------------

    def _reduce_graph(self, grads, variables):
        """Allreduces every non-None, non-local gradient; the same list back, in order."""
        prescale, postscale = gradient_scale_factors(self.op, self.gradient_predivide_factor)
        common = dict(device_dense=self.device_dense, device_sparse=self.device_sparse,
                      compression=self.compression, op=self.op, prescale_factor=prescale,
                      postscale_factor=postscale, process_set=self.process_set)
        out = list(grads)
        todo = []
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                continue
            if id(v) in self.local_vars:
                if self.scale_local_gradients and self.process_set.size() > 1:
                    # A local layer's gradient is taken from this rank's shard
                    # alone; scaling it like an averaged one keeps the update
                    # size of local and global layers consistent.
                    factor = 1.0 / self.process_set.size()
                    if isinstance(g, tf.IndexedSlices):
                        out[i] = tf.IndexedSlices(g.values * factor, g.indices, g.dense_shape)
                    else:
                        out[i] = g * factor
                continue
            if self.sparse_as_dense and isinstance(g, tf.IndexedSlices):
                g = tf.convert_to_tensor(g)
            todo.append((i, g, v))

        with tf.name_scope(self.name + "_Allreduce"):
            grouped = []
            singles = [t for t in todo if isinstance(t[1], tf.IndexedSlices)]
            dense = [t for t in todo if not isinstance(t[1], tf.IndexedSlices)]
            if self.groups is None:
                singles += dense
            elif isinstance(self.groups, int):
                # Contiguous chunks: gradients computed close together in
                # backward share a group.
                grouped = split_list(dense, min(self.groups, len(dense))) if dense else []
            else:
                position = {id(t[2]): t for t in dense}
                taken = set()
                for group in self.groups:
                    members = [position[id(v)] for v in group if id(v) in position and id(v) not in taken]
                    taken.update(id(t[2]) for t in members)
                    if members:
                        grouped.append(members)
                singles += [t for t in dense if id(t[2]) not in taken]
            for i, g, _ in singles:
                kwargs = common
                if isinstance(g, tf.IndexedSlices):
                    # Gathered, not summed: the predivide split (1/f before,
                    # f after) cancels out, and sparse allreduce takes no scales.
                    kwargs = dict(common, prescale_factor=1.0, postscale_factor=1.0)
                # Named by position, not by TF's node names: node names
                # carry Keras' auto-numbered layer and optimizer names, which
                # differ between ranks that built different numbers of them.
                out[i] = hvd.allreduce(g, name="%s.grad_%d" % (self.name, i), ignore_name_scope=True, **kwargs)
            for members in grouped:
                reduced = hvd.grouped_allreduce([g for _, g, _ in members], **common)
                for (i, _, _), r in zip(members, reduced):
                    out[i] = r
        return out

    def reduce(self, grads, variables):
        if tf.executing_eagerly():
            # Eagerly each collective would block before the next starts;
            # inside one function they are all in flight together and fuse.
            if self._eager_reduce is None:
                self._eager_reduce = tf.function(self._reduce_graph, reduce_retracing=True)
            return list(self._eager_reduce(list(grads), list(variables)))
        return self._reduce_graph(grads, variables)

    # -- backward_passes_per_step > 1 --------------------------------------------------------

    def _accumulators_for(self, variables):
        with tf.init_scope():
            # Created outside any function being traced (as Keras creates
            # its slots): a tf.function may only create variables once.
            if self._counter is None:
                self._counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvd_backward_passes")
            for v in variables:
                if id(v) not in self._accumulators:
                    self._accumulators[id(v)] = tf.Variable(tf.zeros(v.shape, dtype=v.dtype), trainable=False,
                                                            name="hvd_aggregated_gradient")
        return [self._accumulators[id(v)] for v in variables]

    def remember_reduced(self, grads):
        self._pre_reduced = [g for g in grads if g is not None]

    def _were_reduced(self, grads):
        # The very tensors _compute_gradients() returned (as minimize() hands
        # them on): reducing them again would double the traffic, and with
        # op=Sum the values too. Anything else is reduced as usual.
        pre, self._pre_reduced = self._pre_reduced, None
        given = [g for g in grads if g is not None]
        return pre is not None and len(pre) == len(given) and all(a is b for a, b in zip(pre, given))

    def run(self, optimizer, grads, variables, apply_fn):
        """Reduces `grads` and calls apply_fn(reduced_grads, variables), or
        accumulates them and applies every backward_passes_per_step calls."""
        grads, variables = list(grads), list(variables)
        if self.backward_passes_per_step == 1:
            if self._were_reduced(grads):
                return apply_fn(grads, variables)
            return apply_fn(self.reduce(grads, variables), variables)

        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        variables = [v for _, v in pairs]
        accumulators = self._accumulators_for(variables)
        updates = [acc.assign_add(tf.convert_to_tensor(g)) for acc, (g, _) in zip(accumulators, pairs)]
        with tf.control_dependencies(updates):
            count = self._counter.assign_add(1)
        passes = self.backward_passes_per_step

        def communicate_and_apply():
            totals = [acc.read_value() for acc in accumulators]
            if self.average_aggregated_gradients:
                totals = [t / tf.cast(passes, t.dtype) for t in totals]
            reduced = self.reduce(totals, variables)
            apply_fn(reduced, variables)
            with tf.control_dependencies([r for r in reduced if r is not None]):
                resets = [acc.assign(tf.zeros_like(acc)) for acc in accumulators]
                resets.append(self._counter.assign(0))
            with tf.control_dependencies(resets):
                return tf.constant(True)

        def only_count_the_step():
            # Keras counts micro-steps in `iterations` as Horovod does, so
            # schedules keyed on iterations see every pass.
            optimizer.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(count >= passes, communicate_and_apply, only_count_the_step)


# -- the optimizer classes ----------------------------------------------------------------------

class _AggregationHelperName:
    # Horovod's optimizers expose their local gradient aggregation as
    # `_agg_helper` (None without backward_passes_per_step > 1), and Horovod's
    # own tests read `_agg_helper.counter`: same name, same meaning here.
    @property
    def _agg_helper(self):
        return self._hvd if self._hvd.backward_passes_per_step > 1 else None


class _DistributedKeras3(_AggregationHelperName):
    """Keras 3: Model.train_step calls apply_gradients(), which calls apply()."""

    _hvd_distributed = True

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        parent = super(_DistributedKeras3, self)
        if trainable_variables is None:
            if not self.built:
                return parent.apply(grads, None)  # Keras' own error: build first
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built and grads:
            # Build outside the conditional branch of backward_passes_per_step.
            with tf.name_scope(self.name):
                self.build(trainable_variables)
            self.built = True
        result = self._hvd.run(self, grads, trainable_variables, lambda g, v: parent.apply(g, v))
        return None if isinstance(result, tf.Tensor) else result


class _DistributedTFKeras(_AggregationHelperName):
    """tf-keras optimizers (optimizer.Optimizer and legacy OptimizerV2): minimize()
    and Model.train_step hand gradients to apply_gradients(). minimize() gets
    them from compute_gradients() (legacy: _compute_gradients()), which return
    them already averaged, as Horovod's optimizer does - code that calls either
    directly sees averaged values - and apply_gradients() then does not reduce
    those same tensors again."""

    _hvd_distributed = True

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        parent = super(_DistributedTFKeras, self)
        if hasattr(parent, "_compute_gradients"):  # legacy OptimizerV2
            pairs = parent._compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        else:
            pairs = parent.compute_gradients(loss, var_list, tape=tape)
        pairs = list(pairs)
        if self._hvd.backward_passes_per_step > 1 or not pairs:
            # Accumulated locally and reduced once per backward_passes_per_step
            # in apply_gradients(): communicating every pass would defeat it.
            return pairs
        variables = [v for _, v in pairs]
        grads = self._hvd.reduce([g for g, _ in pairs], variables)
        self._hvd.remember_reduced(grads)
        return list(zip(grads, variables))

    def compute_gradients(self, loss, var_list, tape=None):
        return self._compute_gradients(loss, var_list, None, tape)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        if not pairs:
            return super(_DistributedTFKeras, self).apply_gradients(pairs, *args, **kwargs)
        parent = super(_DistributedTFKeras, self)

        def apply_fn(grads, variables):
            return parent.apply_gradients(list(zip(grads, variables)), *args, **kwargs)

        result = self._hvd.run(self, [g for g, _ in pairs], [v for _, v in pairs], apply_fn)
        if self._hvd.backward_passes_per_step > 1:
            return self.iterations
        return result


def _register_local_var(self, var):
    """Registers a source/variable as worker local. Horovod will not perform
    any global operations on gradients corresponding to these sources and will
    instead return the local gradient."""
    self._hvd.local_vars[id(var)] = var


def _distributed_class(base, family):
    mixin = _DistributedKeras3 if family == KERAS3 else _DistributedTFKeras
    # Same name and module as the wrapped class: saved models record the
    # original optimizer, so they load with or without hvd.
    return type(base.__name__, (mixin, base), {
        "__module__": base.__module__,
        "__qualname__": getattr(base, "__qualname__", base.__name__),
        "register_local_var": _register_local_var,
    })


def _check_arguments(op, gradient_predivide_factor, average_aggregated_gradients, num_groups, groups,
                     backward_passes_per_step):
    groups = check_optimizer_options(op, gradient_predivide_factor, num_groups, groups)
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    return groups


def _attach(optimizer, base_name, name, device_dense, device_sparse, compression, sparse_as_dense,
            gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients, groups,
            process_set, scale_local_gradients):
    reducer = _GradientReducer(name or "Distributed%s" % base_name, device_dense,
                               device_sparse, compression, sparse_as_dense, gradient_predivide_factor, op,
                               backward_passes_per_step, average_aggregated_gradients, groups, process_set,
                               scale_local_gradients)
    # object.__setattr__: past Keras' and TF's attribute trackers (see _GradientReducer).
    object.__setattr__(optimizer, "_hvd", reducer)
    return optimizer


def create_distributed_optimizer(keras, optimizer, name, device_dense, device_sparse, compression,
                                 sparse_as_dense, gradient_predivide_factor, op, backward_passes_per_step=1,
                                 average_aggregated_gradients=False, num_groups=0, groups=None,
                                 process_set=global_process_set, scale_local_gradients=True):
    """A new optimizer, configured like `optimizer`, whose class derives from
    `optimizer`'s and whose gradients are allreduced before they are applied."""
    groups = _check_arguments(op, gradient_predivide_factor, average_aggregated_gradients, num_groups, groups,
                              backward_passes_per_step)
    if is_distributed(optimizer):
        raise ValueError("hvd.DistributedOptimizer: the optimizer is already a DistributedOptimizer")
    family = optimizer_family(optimizer)
    cls = _distributed_class(type(optimizer), family)
    # As Horovod: a fresh optimizer from the wrapped one's config (the
    # wrapped one is normally fresh too; its state, if any, is not carried).
    wrapped = cls.from_config(optimizer.get_config())
    return _attach(wrapped, type(optimizer).__name__, name, device_dense, device_sparse, compression, sparse_as_dense,
                   gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients, groups,
                   process_set, scale_local_gradients)


def wrap_in_place(optimizer, compression):
    """Turns a (loaded, possibly built) optimizer into a DistributedOptimizer
    without recreating it, so its restored slots and iterations survive."""
    if is_distributed(optimizer):
        return optimizer
    base = type(optimizer)
    object.__setattr__(optimizer, "__class__", _distributed_class(base, optimizer_family(optimizer)))
    return _attach(optimizer, base.__name__, None, "", "", compression, False, 1.0, Average, 1, False, None,
                   global_process_set, True)


def is_distributed(optimizer):
    return bool(getattr(type(optimizer), "_hvd_distributed", False))


def create_partial_distributed_optimizer(keras, optimizer, local_layers, **kwargs):
    # Layers of either Keras are fine: with TF_USE_LEGACY_KERAS=1, tf.keras
    # (tf-keras) and `import keras` (Keras 3) are different packages, where
    # for Horovod's users they were one.
    layer_types = (keras.layers.Layer, tf.keras.layers.Layer)
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, layer_types):
        local_layers = [local_layers]
    elif not all(isinstance(layer, layer_types) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    wrapped = create_distributed_optimizer(keras, optimizer, **kwargs)
    for layer in local_layers:
        for var in layer.trainable_weights:
            wrapped.register_local_var(var)
    return wrapped


# -- value-level helpers ------------------------------------------------------------------------

def _session_value(keras, tensor_or_op):
    if tf.executing_eagerly():
        return tensor_or_op
    # tf.compat.v1 graph mode (tf-keras only): Keras' session runs it.
    return tf.compat.v1.keras.backend.get_session().run(tensor_or_op)


def _constant(value, name):
    if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "_value"):
        return tf.convert_to_tensor(value)
    return tf.constant(value, name=name)


def allreduce(keras, value, name, average, prescale_factor, postscale_factor, op, compression):
    return _session_value(keras, hvd.allreduce(_constant(value, name), average=average, name=name,
                                               prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                               op=op, compression=compression))


def allgather(keras, value, name):
    return _session_value(keras, hvd.allgather(_constant(value, name), name=name))


def broadcast(keras, value, root_rank, name):
    return _session_value(keras, hvd.broadcast(_constant(value, name), root_rank, name=name))


def reducescatter(keras, value, name, op):
    return _session_value(keras, hvd.reducescatter(_constant(value, name), name=name, op=op))


def broadcast_global_variables(keras, root_rank):
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution (TensorFlow 2 has "
                           "no global variable collection). Use hvd.callbacks.BroadcastGlobalVariablesCallback(%d) "
                           "in model.fit, or hvd.broadcast_variables(model.variables, root_rank=%d)."
                           % (root_rank, root_rank))
    return _session_value(keras, hvd.broadcast_global_variables(root_rank))


def tf_variables(variables):
    """Keras 3 variables wrap a tf.Variable (`.value`); TF ops want that one."""
    out = []
    for v in variables:
        if not isinstance(v, tf.Variable) and isinstance(getattr(v, "value", None), tf.Variable):
            v = v.value
        out.append(v)
    return out


def optimizer_variables(optimizer):
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def load_model(keras, filepath, custom_optimizers, custom_objects, compression):
    objects = {}
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        wrap_in_place(optimizer, compression)
    return model


def get_value(value):
    """A Python float from a Keras/TF variable, tensor or number."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(np.asarray(value))
