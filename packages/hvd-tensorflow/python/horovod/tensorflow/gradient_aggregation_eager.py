# gradient_aggregation_eager.py - local gradient accumulation for TF2 code
# (eager, or tf.function as Keras' train_step): gradients are summed into
# tf.Variables for backward_passes_per_step passes and communicated once,
# on the last pass; apply_gradients() applies only on that pass.
"""Local gradient aggregation for eager execution (Horovod's LocalGradientAggregationHelperEager)."""

import tensorflow as tf

from horovod.tensorflow.gradient_aggregation import reduce_except_local
from horovod.tensorflow.mpi_ops import global_process_set
from horovod.tensorflow.util import _var_ref

__all__ = ["LocalGradientAggregationHelperEager"]


class LocalGradientAggregationHelperEager:
    """Accumulates gradients locally for backward_passes_per_step passes and exchanges them across
    the ranks once, on the last pass of each window. For eager execution (including tf.function
    code such as Keras' train_step); graph-mode code uses LocalGradientAggregationHelper.
    """

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense, average_aggregated_gradients,
                 process_set=global_process_set, scale_local_gradients=True):
        if backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.backward_passes_per_step = backward_passes_per_step
        self.allreduce_grads = allreduce_func
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        # Counts the passes of the current window; 0 right after a
        # communication, which is when apply_gradients() applies.
        self.counter = tf.Variable(0, trainable=False, dtype=tf.int32, name="aggregation_counter")
        self.locally_aggregated_grads = {}  # gradient index -> accumulator variable
        self._local_vars = set()

    def register_local_var(self, var):
        """Marks `var` as local to this worker: its accumulated gradient is never exchanged with the
        other ranks and keeps its local value.
        """
        self._local_vars.add(_var_ref(var))

    def _convert(self, grad):
        if isinstance(grad, tf.IndexedSlices):
            if not self.sparse_as_dense:
                raise ValueError("IndexedSlices are not supported when `backward_passes_per_step` > 1 and "
                                 "`sparse_as_dense` is False.")
            return tf.convert_to_tensor(grad)
        return grad

    def compute_gradients(self, grads, vars):
        """Adds `grads` to the local sums; on every backward_passes_per_step-th call returns the
        allreduced sums (divided by backward_passes_per_step if average_aggregated_gradients),
        otherwise the local sums so far."""
        grads = [self._convert(g) for g in grads]
        vars = list(vars)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            if i not in self.locally_aggregated_grads:
                # Created on first use (inside tf.function: on the first trace).
                self.locally_aggregated_grads[i] = tf.Variable(tf.zeros_like(grads[i]), trainable=False)
            self.locally_aggregated_grads[i].assign_add(grads[i])
        self.counter.assign_add(1)
        accumulators = [self.locally_aggregated_grads[i] for i in present]

        def communicate():
            summed = [acc.read_value() for acc in accumulators]
            reduced = reduce_except_local(self.allreduce_grads, summed, [vars[i] for i in present],
                                          self._local_vars, self.process_set, self.scale_local_gradients)
            if self.average_aggregated_gradients:
                reduced = [r / tf.cast(self.backward_passes_per_step, r.dtype) for r in reduced]
            reduced = [tf.convert_to_tensor(r) for r in reduced]
            with tf.control_dependencies(reduced):
                for acc in accumulators:
                    acc.assign(tf.zeros_like(acc))
                self.counter.assign(0)
            return [tf.identity(r) for r in reduced]

        def accumulate_only():
            return [acc.read_value() for acc in accumulators]

        if not accumulators:
            return [None] * len(grads)
        out = tf.cond(tf.equal(self.counter, self.backward_passes_per_step), communicate, accumulate_only)
        if not isinstance(out, (list, tuple)):
            out = [out]
        result = [None] * len(grads)
        for i, g in zip(present, out):
            result[i] = g
        return result

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        """Runs `apply_grads_closure` on the passes that communicated; on the others only
        advances `optimizer.iterations`, as an applied step would."""
        def apply():
            apply_grads_closure()
            return tf.constant(True)

        def skip():
            iterations = getattr(optimizer, "iterations", None)
            if isinstance(iterations, tf.Variable):
                iterations.assign_add(tf.constant(1, dtype=iterations.dtype))
            return tf.constant(False)

        return tf.cond(tf.equal(self.counter, 0), apply, skip)
