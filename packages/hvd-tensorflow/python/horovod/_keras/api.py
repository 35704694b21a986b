# _keras/api.py - builds the public module of horovod.tensorflow.keras or
# horovod.keras for one `keras`: the two public packages differ only in which
# Keras they bind (tf.keras vs standalone keras), so their functions are made
# here once, with Horovod's signatures, and re-exported there.
"""Factory for the public Keras API functions."""

from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import Average, global_process_set
import horovod._keras as _impl


def make_api(keras):
    """Horovod's Keras-level functions bound to `keras`; a dict name -> function."""

    def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                             compression=Compression.none, sparse_as_dense=False,
                             gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                             average_aggregated_gradients=False, num_groups=0, groups=None,
                             process_set=global_process_set, scale_local_gradients=True):
        """Wraps a Keras optimizer so that the gradients it computes are allreduced (averaged by default)
        across the ranks before they are applied to the weights.

        Args:
            optimizer: the Keras optimizer that computes gradients and applies updates.
            name: optional prefix for the names of the ops created when gradients are applied;
                "Distributed" plus the class name of `optimizer` when not given.
            device_dense: device on which dense gradients are processed ('' leaves the
                placement to TensorFlow).
            device_sparse: device on which sparse gradients are processed ('' leaves the
                placement to TensorFlow).
            compression: a compressor applied to gradients before they are exchanged, to cut the
                bytes each worker sends and receives. Compression.none by default.
            sparse_as_dense: when True, sparse gradients are converted to dense tensors before the
                exchange, which can be faster and leaner when they are not very sparse. False by
                default.
            gradient_predivide_factor: moves part of the averaging before the sum: gradients are
                multiplied by 1.0 / gradient_predivide_factor before summing and by
                gradient_predivide_factor / size afterwards (only with op == Average).
            op: the reduction used to combine gradients across the ranks; Average by default.
            backward_passes_per_step: how many backward passes to accumulate locally before the
                gradients are allreduced and applied, to combine several mini-batches into one
                update.
            average_aggregated_gradients: with backward_passes_per_step > 1, whether the
                accumulated gradients are divided by backward_passes_per_step (averaged over the
                passes) rather than summed.
            num_groups: deprecated in favour of `groups`: the number of groups the gradient
                allreduces are split into; 0 (no explicit grouping) by default.
            groups: how gradient allreduces are grouped: None (the default) for no explicit
                grouping; a positive integer to split them into that many groups; or a list of
                lists of tf.Variable, where the variables of each inner list are reduced together
                and every variable not listed is a group of its own.
            process_set: the ProcessSet over whose ranks the gradients are reduced; the global
                process set unless given.
            scale_local_gradients: whether the gradients of variables registered as local are
                divided by the process set's size, like the averaged ones. True by default.

        Returns:
            An optimizer of a class derived from `optimizer`'s class, configured
            like it (a new instance built from its config).
        """
        return _impl.create_distributed_optimizer(
            keras, optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)

    def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                                    compression=Compression.none, sparse_as_dense=False,
                                    gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                                    average_aggregated_gradients=False, groups=None,
                                    process_set=global_process_set, local_layers=None,
                                    scale_local_gradients=True):
        """Like DistributedOptimizer, except that the trainable weights of `local_layers` (one layer or
        a list of layers) are left out of the exchange: their gradients stay local to each rank
        (divided by the process set's size when `scale_local_gradients` is set). All other arguments
        mean what they mean for DistributedOptimizer.
        """
        return _impl.create_partial_distributed_optimizer(
            keras, optimizer, local_layers, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)

    def broadcast_global_variables(root_rank):
        """Copies the value of every global variable from `root_rank` to all other ranks.

        Only in tf.compat.v1 graph mode: TensorFlow 2 has no global variables,
        so eagerly this raises RuntimeError; use
        callbacks.BroadcastGlobalVariablesCallback(root_rank) in model.fit.

        Arguments:
            root_rank: the rank whose variable values are sent to the others.
        """
        return _impl.broadcast_global_variables(keras, root_rank)

    def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
                  compression=Compression.none):
        """Reduces a value (anything convertible to a tensor) across all ranks.

        Arguments:
            value: the value to reduce; it must have the same shape on every rank.
            name: optional name, also given to the constant made from `value`.
            average:
                .. warning:: .. deprecated:: 0.19.0

                    Superseded by `op`; slated for removal in v1.0.
            prescale_factor: every rank's input is multiplied by this before the reduction.
            postscale_factor: the reduced result is multiplied by this afterwards.
            op: how the ranks' values are combined; None means Average.
            compression: a compressor applied before sending and undone on the result, to cut the
                bytes each worker sends and receives. Compression.none by default.

        Returns:
            The reduced value: a tensor when executing eagerly, or the value computed by Keras'
            session in tf.compat.v1 graph mode.
        """
        return _impl.allreduce(keras, value, name, average, prescale_factor, postscale_factor, op, compression)

    def allgather(value, name=None):
        """Gathers a value (anything convertible to a tensor) from all ranks, stacked along the first
        dimension in rank order.

        The ranks' values may differ in their first dimension only: the number of dimensions and the
        remaining sizes must match.

        Arguments:
            value: the value to gather.
            name: optional name, also given to the constant made from `value`.

        Returns:
            The gathered value: a tensor when executing eagerly, or the value computed by Keras'
            session in tf.compat.v1 graph mode.
        """
        return _impl.allgather(keras, value, name)

    def broadcast(value, root_rank, name=None):
        """Copies a value (anything convertible to a tensor) from `root_rank` to all ranks.

        Arguments:
            value: the value to broadcast; it must have the same shape on every rank.
            root_rank: the rank whose value is sent to the others.
            name: optional name, also given to the constant made from `value`.

        Returns:
            The root rank's value: a tensor when executing eagerly, or the value computed by
            Keras' session in tf.compat.v1 graph mode.
        """
        return _impl.broadcast(keras, value, root_rank, name)

    def reducescatter(value, name=None, op=Average):
        """Reduce-scatter on a value (anything convertible to a tensor): the ranks' values are reduced
        and each rank gets back its own block of rows of the result.

        Arguments:
            value: the value to reduce and scatter; it must have the same shape on every rank.
            name: optional name, also given to the constant made from `value`.
            op: how the ranks' values are combined: Average (the default) or Sum.

        Returns:
            This rank's block of the reduction: a tensor when executing eagerly, or the value
            computed by Keras' session in tf.compat.v1 graph mode.
        """
        return _impl.reducescatter(keras, value, name, op)

    def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
        """Loads a saved Keras model and turns its optimizer into a DistributedOptimizer.

        The optimizer the model was saved with is wrapped in place rather than rebuilt, so its
        restored state (slot variables, iteration count) carries over into further training.

        Every optimizer class of `keras.optimizers` is recognised without help; only other
        optimizer classes need `custom_optimizers` or `custom_objects`.

        Arguments:
            filepath: where the model is read from: a path to the saved model, or an open
                h5py.File.
            custom_optimizers: optional list of Optimizer subclasses the saved model may use.
            custom_objects: optional dict from names to custom classes or functions needed to
                deserialize the model.
            compression: a compressor applied to gradients before they are exchanged.
                Compression.none by default.

        Returns:
            The loaded Keras model.

        Raises:
            ImportError: from Keras, when loading an HDF5 file without h5py installed.
            ValueError: from Keras, when the file is not a valid saved model.
        """
        return _impl.load_model(keras, filepath, custom_optimizers, custom_objects, compression)

    return {f.__name__: f for f in (DistributedOptimizer, PartialDistributedOptimizer, broadcast_global_variables,
                                    allreduce, allgather, broadcast, reducescatter, load_model)}


def publish(namespace, objects):
    """Puts `objects` (name -> function or class) into a public module's namespace, renamed
    so they are importable and picklable under that module's name."""
    for name, obj in objects.items():
        obj.__module__, obj.__qualname__ = namespace["__name__"], name
        namespace[name] = obj
