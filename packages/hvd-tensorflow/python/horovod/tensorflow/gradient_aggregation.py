# gradient_aggregation.py - local gradient accumulation for graph execution
# (tf.compat.v1 graphs and tf.function): gradients are summed into
# non-trainable variables for backward_passes_per_step passes, communicated
# once on the last pass, and applied only then. The decision is made inside
# the graph (tf.cond on a step counter), so one graph serves every step.
"""Local gradient aggregation for graph mode (Horovod's LocalGradientAggregationHelper)."""

import os

import tensorflow as tf

from horovod.tensorflow.mpi_ops import global_process_set, size_op
from horovod.tensorflow.util import _var_ref

__all__ = ["LocalGradientAggregationHelper"]


def _scale_local(grads, vars, local_refs, process_set, scale):
    """Divides the gradients of worker-local variables by the set's size.

    Averaged global gradients carry a 1/size factor; scaling the local ones
    the same way keeps their relative magnitudes (Horovod's rule).
    """
    if not scale or not local_refs:
        return grads
    size = size_op(process_set_id=process_set.process_set_id) if int(os.environ.get("HOROVOD_ELASTIC", 0)) \
        else process_set.size()
    out = []
    for var, grad in zip(vars, grads):
        if grad is not None and _var_ref(var) in local_refs:
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.IndexedSlices(grad.values / tf.cast(size, grad.values.dtype), grad.indices,
                                        grad.dense_shape)
            else:
                grad = grad / tf.cast(size, grad.dtype)
        out.append(grad)
    return out


def reduce_except_local(allreduce_func, grads, vars, local_refs, process_set, scale_local_gradients):
    """Allreduces the gradients of all variables but the worker-local ones (registered
    with register_local_var/register_local_source), which keep their local value."""
    grads = list(grads)
    vars = list(vars)
    if not local_refs:
        return list(allreduce_func(grads, vars))
    shared = [i for i, v in enumerate(vars) if _var_ref(v) not in local_refs]
    reduced = allreduce_func([grads[i] for i in shared], [vars[i] for i in shared]) if shared else []
    out = list(grads)
    for i, g in zip(shared, reduced):
        out[i] = g
    return _scale_local(out, vars, local_refs, process_set, scale_local_gradients)


class LocalGradientAggregationHelper:
    """Accumulates gradients locally for backward_passes_per_step passes and exchanges them across
    the ranks once, on the last pass of each window. For graph-mode (tf.compat.v1) execution only;
    LocalGradientAggregationHelperEager covers eager code.
    """

    _OPTIMIZER_TYPE_KERAS = "optimizer_type_keras"
    _OPTIMIZER_TYPE_LEGACY = "optimizer_type_legacy"

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense, average_aggregated_gradients,
                 rank, optimizer_type, process_set=global_process_set, scale_local_gradients=True, name=""):
        if backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_grads = allreduce_func
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.rank = rank
        self.optimizer_type = optimizer_type
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.name = name
        self.counter = None
        self.locally_aggregated_grads = []  # one variable per not-None gradient
        self._local_vars = set()

    def register_local_var(self, var):
        """Marks `var` as local to this worker: its accumulated gradient is never exchanged with the
        other ranks and keeps its local value.
        """
        self._local_vars.add(_var_ref(var))

    def _maybe_convert_grad(self, grad):
        if isinstance(grad, tf.IndexedSlices):
            if not self.sparse_as_dense:
                raise ValueError("IndexedSlices are not supported when `backward_passes_per_step` > 1 and "
                                 "`sparse_as_dense` is False.")
            return tf.convert_to_tensor(grad)
        return grad

    def _init_aggregation_vars(self, grads):
        if self.counter is not None:
            return
        # Local (not global) variables: they are per-worker scratch space,
        # so neither checkpoints nor broadcast_global_variables touch them.
        collections = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
        scope = "aggregation_variables_%s%d" % (self.name, self.rank)
        with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
            self.counter = tf.compat.v1.get_variable("aggregation_counter", shape=(), dtype=tf.int32,
                                                     trainable=False,
                                                     initializer=tf.compat.v1.zeros_initializer(),
                                                     collections=collections, use_resource=True)
            for idx, grad in enumerate(grads):
                if grad is None:
                    continue
                self.locally_aggregated_grads.append(tf.compat.v1.get_variable(
                    str(idx), shape=grad.shape, dtype=grad.dtype, trainable=False,
                    initializer=tf.compat.v1.zeros_initializer(), collections=collections, use_resource=True))
        if self.optimizer_type == self._OPTIMIZER_TYPE_KERAS and not tf.executing_eagerly():
            # Keras in TF1 graph mode runs its own session: initialise there.
            session = tf.compat.v1.keras.backend.get_session(op_input_list=())
            session.run(tf.compat.v1.variables_initializer([self.counter] + self.locally_aggregated_grads))

    def compute_gradients(self, grads, vars):
        """Adds `grads` to the local sums. On every backward_passes_per_step-th call the sums are
        allreduced (and divided by backward_passes_per_step when average_aggregated_gradients is
        set), returned, and reset; on the other calls the local sums so far are returned.
        """
        grads = [self._maybe_convert_grad(g) for g in grads]
        vars = list(vars)
        self._init_aggregation_vars(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        accumulators = self.locally_aggregated_grads

        adds = [acc.assign_add(grads[i], read_value=False) for acc, i in zip(accumulators, present)]
        with tf.control_dependencies(adds):
            passes = self.counter.assign_add(1)

        def communicate():
            summed = [acc.read_value() for acc in accumulators]
            reduced = reduce_except_local(self._allreduce_grads, summed, [vars[i] for i in present],
                                          self._local_vars, self.process_set, self.scale_local_gradients)
            if self.average_aggregated_gradients:
                reduced = [r / tf.cast(self.backward_passes_per_step, r.dtype) for r in reduced]
            reduced = [tf.convert_to_tensor(r) for r in reduced]
            with tf.control_dependencies(reduced):
                # Start the next window: zero the sums and the pass counter.
                resets = [acc.assign(tf.zeros_like(acc), read_value=False) for acc in accumulators]
                resets.append(self.counter.assign(0, read_value=False))
            with tf.control_dependencies(resets):
                return [tf.identity(r) for r in reduced]

        def accumulate_only():
            return [acc.read_value() for acc in accumulators]

        if not accumulators:
            return [None] * len(grads)
        with tf.control_dependencies([passes]):
            out = tf.cond(tf.equal(passes, self.backward_passes_per_step), communicate, accumulate_only)
        if not isinstance(out, (list, tuple)):
            out = [out]
        result = [None] * len(grads)
        for i, g in zip(present, out):
            result[i] = g
        return result

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        """Runs `apply_grads_closure` only on the passes whose gradients were just exchanged; on the
        others it merely advances global_step and the optimizer's iterations, as an applied step
        would.
        """
        grads_and_vars = list(args[0]) if args else list(kwargs.get("grads_and_vars", []))
        global_step = kwargs.get("global_step")

        def apply():
            with tf.control_dependencies([apply_grads_closure()]):
                return tf.constant(True)

        def skip():
            # Steps without an update still count, as they would in a run
            # without aggregation (global_step for hooks, iterations for Keras).
            ops = []
            if global_step is not None:
                ops.append(global_step.assign_add(tf.constant(1, dtype=global_step.dtype.base_dtype),
                                                  read_value=False))
            iterations = getattr(optimizer, "iterations", None)
            if isinstance(iterations, tf.Variable):
                ops.append(iterations.assign_add(tf.constant(1, dtype=iterations.dtype.base_dtype),
                                                 read_value=False))
            with tf.control_dependencies(ops):
                return tf.constant(False)

        deps = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies(deps):
            applied = tf.cond(tf.equal(self.counter.read_value(), 0), apply, skip)
        return applied.op if hasattr(applied, "op") else applied
