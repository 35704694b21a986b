# gradient_tape.py - DistributedGradientTape and PartialDistributedGradientTape:
# a tf.GradientTape whose gradient() reduces what the wrapped tape computed
# across the ranks (with the optimizer's gradient reduction), except for the
# sources registered as local.
"""DistributedGradientTape and PartialDistributedGradientTape."""

import tensorflow as tf

from horovod.common.optimizer_options import check_optimizer_options
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.gradient_aggregation import reduce_except_local
from horovod.tensorflow.mpi_ops import Average, global_process_set
from horovod.tensorflow.optimizer import _make_allreduce_grads_fn
from horovod.tensorflow.util import _var_ref


class _DistributedGradientTape(object):
    """Mixed in front of the wrapped tape's class: gradient() reduces what the tape computed."""

    def _hvd_setup(self, device_dense, device_sparse, compression, sparse_as_dense, op,
                   gradient_predivide_factor, groups, process_set, scale_local_gradients):
        self._allreduce_grads = _make_allreduce_grads_fn(
            "DistributedGradientTape", device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """Marks `source` as local to this worker: its gradient is never exchanged with the other ranks
        and the locally computed value is returned instead.
        """
        self._local_sources.add(_var_ref(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        """Computes the gradient like tf.GradientTape.gradient(), then averages (or reduces with
        the tape's op) every gradient across the process set, except those of local sources.

        `use_generic_names` names the collectives grad_0, grad_1, ... (outside any name
        scope), for graphs whose tensor names differ between ranks.
        """
        grads = super(_DistributedGradientTape, self).gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads)
        reduced = reduce_except_local(
            lambda g, v: self._allreduce_grads(g, v, use_generic_names), flat_grads, flat_sources,
            self._local_sources, self.process_set, self.scale_local_gradients)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Computes the gradients as gradient() does and splits them by source.

        Returns:
          (local_vars_grads, global_vars_grads): lists of (variable, gradient)
          pairs, in the order of `sources`; the first for sources registered as
          local (their gradients are not reduced across ranks), the second for
          the others.
        """
        flat_sources = tf.nest.flatten(sources)
        grads = tf.nest.flatten(self.gradient(target, sources, output_gradients, use_generic_names))
        local_vars_grads, global_vars_grads = [], []
        for var, grad in zip(flat_sources, grads):
            is_local = _var_ref(var) in self._local_sources
            (local_vars_grads if is_local else global_vars_grads).append((var, grad))
        return local_vars_grads, global_vars_grads


_tape_classes = {}


def _distributed_tape_class(base):
    # One subclass per tape class (users may subclass tf.GradientTape), keeping
    # its name so isinstance() checks and reprs look as before.
    if base not in _tape_classes:
        _tape_classes[base] = type(base.__name__, (_DistributedGradientTape, base), {})
    return _tape_classes[base]


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False,
                            op=Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=global_process_set,
                            scale_local_gradients=True):
    """Wraps a tf.GradientTape so that the gradients it computes are allreduced across the ranks
    before they are returned, ready to be applied to the weights.

    Args:
      gradtape:
        The tf.GradientTape that records the computation and computes the gradients.
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
      op:
        The reduction used to combine gradients across the ranks.
      gradient_predivide_factor:
        Only with op == Average: moves part of the averaging before the sum. Gradients
        are multiplied by 1.0 / gradient_predivide_factor before summing and by
        gradient_predivide_factor / size afterwards.
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
      scale_local_gradients: whether the gradients of sources registered as local are
        divided by the process set's size, like the averaged ones. True by default.
    """
    groups = check_optimizer_options(op, gradient_predivide_factor, num_groups, groups)
    cls = _distributed_tape_class(type(gradtape))
    tape = cls.__new__(cls)
    # The new object shares the wrapped tape's state (the recorded operations,
    # persistence, watched variables), so it works whether it is created
    # after the `with` block or wraps a fresh tape used as the context manager.
    tape.__dict__.update(gradtape.__dict__)
    tape._hvd_setup(device_dense, device_sparse, compression, sparse_as_dense, op, gradient_predivide_factor,
                    groups, process_set, scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """Like DistributedGradientTape, but the gradients of the layers in `local_layers` are not
    exchanged: they stay local to each rank and are applied as computed there.

    Args:
      gradtape:
        The tf.GradientTape that records the computation and computes the gradients.
      local_layers:
        A tf.keras.layers.Layer, or a collection of them, whose trainable weights keep
        rank-local gradients. Without it the tape behaves exactly like
        DistributedGradientTape.

    All other arguments mean what they mean for DistributedGradientTape.
    """
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, tf.keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
