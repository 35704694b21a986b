# optimizer.py - DistributedOptimizer for tf.compat.v1 optimizers (Keras
# optimizers are handed to horovod.tensorflow.keras), its Adasum variant that
# combines the variables' changes instead of the gradients, and the gradient
# reduction (_make_allreduce_grads_fn) that DistributedGradientTape and the
# Keras optimizers share with it.
"""DistributedOptimizer for tf.compat.v1 optimizers, and the gradient reduction behind it."""

import tensorflow as tf

from horovod.common.optimizer_options import check_optimizer_options, gradient_scale_factors
from horovod.common.util import split_list
from horovod.tensorflow.collectives import _allreduce_cond, _grouped_allreduce_cond, grouped_allreduce
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper, reduce_except_local
from horovod.tensorflow.mpi_ops import Adasum, Average, global_process_set, rank, size
from horovod.tensorflow.util import _cache, _executing_eagerly, _make_subgraph, _var_ref, vars_to_refs

# Horovod's name for the option checks, kept for callers that import it from
# horovod.tensorflow; the checks themselves are hvd-core's, shared by every binding.
_check_common_options = check_optimizer_options


def _index_groups(grads, vars, groups):
    """Which gradients travel together, as a tuple of index tuples (None: one op per gradient).

    `groups` is a number of groups (consecutive gradients split evenly) or a
    tuple of tuples of variable references; gradients of variables not named
    in any group form a group each, as in Horovod.
    """
    present = [i for i, g in enumerate(grads) if g is not None]
    if groups is None:
        return None
    if isinstance(groups, int):
        parts = split_list(present, min(groups, len(present))) if present else []
        return tuple(tuple(p) for p in parts if p)
    if vars is None:
        raise ValueError("groups given as lists of variables need the variables of the gradients")
    index_of = {_var_ref(v): i for i, v in enumerate(vars) if grads[i] is not None}
    out = []
    for group in groups:
        idx = tuple(index_of.pop(ref) for ref in group if ref in index_of)
        if idx:
            out.append(idx)
    out.extend((i,) for i in sorted(index_of.values()))
    return tuple(out)


@_cache
def _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                    gradient_predivide_factor, groups, process_set):
    prescale_factor, postscale_factor = gradient_scale_factors(op, gradient_predivide_factor)
    dense_options = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression, op=op,
                         prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                         process_set=process_set)
    # Sparse gradients are allgathered, which takes no scale factors; for
    # Average the two factors cancel out anyway (1/f before, f after).
    sparse_options = dict(dense_options, prescale_factor=1.0, postscale_factor=1.0)

    def options_for(grad):
        return sparse_options if isinstance(grad, tf.IndexedSlices) else dense_options

    def reduce(grads, index_groups, use_generic_names):
        with tf.name_scope(name + "_Allreduce"):
            if sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            if index_groups is None:
                return [None if g is None else
                        _allreduce_cond(g, name="grad_%d" % i if use_generic_names else None,
                                        ignore_name_scope=use_generic_names, **options_for(g))
                        for i, g in enumerate(grads)]
            out = [None] * len(grads)
            for k, idx in enumerate(index_groups):
                # Within a group, dense and sparse members travel separately
                # (sparse ones need other scale factors).
                for kind, members in (("", [i for i in idx if not isinstance(grads[i], tf.IndexedSlices)]),
                                      ("_sparse", [i for i in idx if isinstance(grads[i], tf.IndexedSlices)])):
                    if not members:
                        continue
                    reduced = _grouped_allreduce_cond([grads[i] for i in members],
                                                      name="grad_%d%s" % (k, kind) if use_generic_names else None,
                                                      ignore_name_scope=use_generic_names,
                                                      **options_for(grads[members[0]]))
                    for i, r in zip(members, reduced):
                        out[i] = r
            return out

    # Built once per configuration (this function is cached), so eager
    # training steps reuse one traced graph instead of retracing.
    reduce_in_graph = _make_subgraph(reduce)

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        index_groups = _index_groups(grads, None if vars is None else list(vars), groups)
        if not any(g is not None for g in grads):
            return grads
        if _executing_eagerly():
            return list(reduce_in_graph(grads, index_groups, use_generic_names))
        return reduce(grads, index_groups, use_generic_names)

    return allreduce_grads


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set=global_process_set):
    """Returns `allreduce_grads(grads, vars=None, use_generic_names=False)`: the list of
    gradients reduced across `process_set` (None gradients stay None)."""
    groups = vars_to_refs(groups) if isinstance(groups, list) else groups
    return _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                           gradient_predivide_factor, groups, process_set)


_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _WrappedLegacyOptimizer(_LegacyOptimizer):
    """Base of the tf.compat.v1 wrappers: slots and variables are the wrapped optimizer's."""

    def get_slot(self, *args, **kwargs):
        """Delegates to the wrapped optimizer's get_slot()."""
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        """Delegates to the wrapped optimizer's get_slot_names()."""
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        """Delegates to the wrapped optimizer's variables()."""
        return self._optimizer.variables(*args, **kwargs)


class _DistributedOptimizer(_WrappedLegacyOptimizer):
    """Wraps a tf.compat.v1 optimizer so that the gradients it computes are allreduced across the
    ranks before they are applied to the weights.
    """

    def __init__(self, optimizer, name=None, use_locking=False, device_dense='',
                 device_sparse='', compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                 backward_passes_per_step=1, average_aggregated_gradients=False,
                 groups=None, process_set=global_process_set, scale_local_gradients=True):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super(_DistributedOptimizer, self).__init__(name=name, use_locking=use_locking)

        self._optimizer = optimizer
        self._allreduce_grads = _make_allreduce_grads_fn(
            name, device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set=process_set)
        self._local_vars = set()
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._agg_helper = None
        if backward_passes_per_step > 1:
            if _executing_eagerly():
                raise ValueError("backward_passes_per_step > 1 is not yet supported "
                                 "for _LegacyOptimizer with eager execution.")
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step=backward_passes_per_step,
                allreduce_func=self._allreduce_grads,
                sparse_as_dense=sparse_as_dense,
                average_aggregated_gradients=average_aggregated_gradients,
                rank=rank(),
                optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY,
                process_set=process_set,
                scale_local_gradients=scale_local_gradients,
                name=name)

    def register_local_var(self, var):
        """Marks `var` as local to this worker: its gradient is never exchanged with the other ranks
        and the locally computed value is used instead.
        """
        if self._agg_helper:
            self._agg_helper.register_local_var(var)
        else:
            self._local_vars.add(_var_ref(var))

    def compute_gradients(self, *args, **kwargs):
        """Computes the gradients with the wrapped optimizer (see Optimizer.compute_gradients()) and
        allreduces them across the ranks before returning them.

        Gradients of variables registered with register_local_var() keep their local value. With
        backward_passes_per_step > 1, the gradients are accumulated locally and exchanged only on
        every backward_passes_per_step-th call.
        """
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        grads, vars = zip(*gradients)
        if self._agg_helper:
            avg_grads = self._agg_helper.compute_gradients(grads, vars)
        else:
            avg_grads = reduce_except_local(self._allreduce_grads, grads, vars, self._local_vars,
                                            self.process_set, self.scale_local_gradients)
        return list(zip(avg_grads, vars))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Delegates to the wrapped optimizer's apply_gradients() (with local accumulation, only every
        backward_passes_per_step-th call really applies).
        """
        if self._agg_helper:
            grads_and_vars = list(grads_and_vars)
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name),
                self._optimizer, grads_and_vars, global_step=global_step, name=name)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)


class _DistributedAdasumOptimizer(_WrappedLegacyOptimizer):
    """op=Adasum for a tf.compat.v1 optimizer: each rank applies its own
    gradients with the wrapped optimizer, and the changes this made to the
    variables are combined across ranks with Adasum (Horovod's delta
    optimizer). compute_gradients() therefore returns local gradients. With
    backward_passes_per_step=k the local optimizer steps k times and the
    changes of those k steps are combined on the k-th call."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 backward_passes_per_step=1, process_set=global_process_set):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super(_DistributedAdasumOptimizer, self).__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression
        self._passes = backward_passes_per_step
        self.process_set = process_set

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's local gradients (the combination happens in apply_gradients)."""
        return self._optimizer.compute_gradients(*args, **kwargs)

    def _combine(self, variables, starts):
        changes = [v.read_value() - s for v, s in zip(variables, starts)]
        compressed = [self._compression.compress(c) for c in changes]
        combined = grouped_allreduce([c for c, _ in compressed], op=Adasum, process_set=self.process_set,
                                     name=self._name + "_delta")
        return tf.group(*[v.assign(s + self._compression.decompress(c, ctx), use_locking=self._use_locking)
                          for v, s, c, (_, ctx) in zip(variables, starts, combined, compressed)])

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the local update, then (every backward_passes_per_step calls)
        replaces each variable's change by the Adasum combination of all ranks'
        changes."""
        grads_and_vars = list(grads_and_vars)
        variables = [v for g, v in grads_and_vars if g is not None]
        if not self.process_set.included() or not variables:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        if self._passes == 1:
            starts = [tf.identity(v.read_value()) for v in variables]
            with tf.control_dependencies(starts):
                update = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
            with tf.control_dependencies([update]):
                return self._combine(variables, starts)
        # Several passes: where each window starts is kept in slots; a counter
        # says where in the window this call is.
        with tf.init_scope():  # variables live outside tf.function graphs
            self._create_non_slot_variable(initial_value=tf.constant(0, tf.int64), name="adasum_passes",
                                           colocate_with=variables[0])
            starts = [self._zeros_slot(v, "adasum_start", self._name) for v in variables]
            home = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        passes = self._get_non_slot_variable("adasum_passes", graph=home)
        window_starts = tf.equal(passes % self._passes, 0)
        snapshot = tf.cond(window_starts, lambda: tf.group(*[s.assign(v) for s, v in zip(starts, variables)]),
                           tf.no_op)
        with tf.control_dependencies([snapshot]):
            update = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        with tf.control_dependencies([update]):
            count = passes.assign_add(1)
        return tf.cond(tf.equal(count % self._passes, 0), lambda: self._combine(variables, starts), tf.no_op)


def _is_keras_optimizer(optimizer):
    if isinstance(optimizer, tf.keras.optimizers.Optimizer):
        return True
    # tf-keras (Keras 2) or a standalone Keras whose classes are not tf.keras'.
    return any(cls.__module__.split(".")[0] in ("keras", "tf_keras") and cls.__name__ == "Optimizer"
               for cls in type(optimizer).__mro__)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='',
                         device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False,
                         num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps `optimizer` for distributed training: the wrapped optimizer still computes the local
    gradients and applies the updates, but the gradients are combined across the ranks in between.

    Args:
      optimizer:
        The optimizer that computes gradients and applies updates: a
        tf.compat.v1.train.Optimizer, or a Keras optimizer (handed to
        horovod.tensorflow.keras.DistributedOptimizer).
      name:
        Optional prefix for the names of the ops created when gradients are applied;
        "Distributed" plus the class name of `optimizer` when not given.
      use_locking:
        Whether variable updates take locks (see Optimizer.__init__).
      device_dense:
        Device on which dense gradients are processed.
      device_sparse:
        Device on which sparse gradients are processed.
      compression:
        A compressor applied to gradients before they are exchanged, to cut the bytes
        sent at each update. Compression.none (no compression) by default.
      sparse_as_dense:
        When True, sparse gradients are converted to dense tensors before the exchange,
        which can be faster and leaner when they are not very sparse. False by default.
      backward_passes_per_step:
        How many backward passes to accumulate locally before the gradients are
        allreduced and applied, to combine several mini-batches into one update.
      op:
        The reduction used to combine gradients across the ranks.
      gradient_predivide_factor:
        Only with op == Average: moves part of the averaging before the sum. Gradients
        are multiplied by 1.0 / gradient_predivide_factor before summing and by
        gradient_predivide_factor / size afterwards.
      average_aggregated_gradients:
        With backward_passes_per_step > 1, whether the accumulated gradients are
        divided by backward_passes_per_step (averaged over the passes) rather than
        summed.
      num_groups:
        Deprecated in favour of `groups`: the number of groups the gradient allreduces are
        split into. 0 (no explicit grouping) by default.
      groups:
        How gradient allreduces are grouped: None (the default) for no explicit grouping;
        a positive integer to split them into that many groups; or a list of lists of
        tf.Variable, where the variables of each inner list are reduced together and every
        variable not listed is a group of its own.
      process_set: the ProcessSet over whose ranks the gradients are reduced; the global
        process set unless given.
      scale_local_gradients: whether the gradients of variables registered as local are
        divided by the process set's size, like the averaged ones. True by default.
    """
    groups = check_optimizer_options(op, gradient_predivide_factor, num_groups, groups)
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")

    if isinstance(optimizer, _LegacyOptimizer):
        if op == Adasum and size() > 1:
            return _DistributedAdasumOptimizer(optimizer, name=name, use_locking=use_locking,
                                               compression=compression,
                                               backward_passes_per_step=backward_passes_per_step,
                                               process_set=process_set)
        return _DistributedOptimizer(
            optimizer=optimizer, name=name, use_locking=use_locking, device_dense=device_dense,
            device_sparse=device_sparse, compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)
    if _is_keras_optimizer(optimizer):
        if op == Adasum:
            raise ValueError("op == Adasum is not supported yet with Keras")
        # Imported here: Keras is only loaded for users who use it.
        import horovod.tensorflow.keras as hvd_k
        return hvd_k.DistributedOptimizer(
            optimizer=optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)
    raise ValueError("Provided optimizer doesn't inherit from either legacy TensorFlow or Keras optimizer: %s"
                     % optimizer)
