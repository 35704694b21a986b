# _keras/api.py - builds the public module of horovod.tensorflow.keras or
# horovod.keras for one `keras`: the two public packages differ only in which
# Keras they bind (tf.keras vs standalone keras), so their functions are made
# here once, with Horovod's signatures and docstrings, and re-exported there.
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
        """
        An optimizer that wraps another keras.optimizers.Optimizer, using an allreduce to
        average gradient values before applying gradients to model weights.

        Args:
            optimizer: Optimizer to use for computing gradients and applying updates.
            name: Optional name prefix for the operations created when applying
                  gradients. Defaults to "Distributed" followed by the provided
                  optimizer type.
            device_dense: Device to be used for dense tensors. Uses GPU by default
                          if Horovod was build with HOROVOD_GPU_OPERATIONS.
            device_sparse: Device to be used for sparse tensors. Uses GPU by default
                           if Horovod was build with HOROVOD_GPU_OPERATIONS.
            compression: Compression algorithm used to reduce the amount of data
                         sent and received by each worker node.  Defaults to not
                         using compression.
            sparse_as_dense: Treat all sparse gradients as dense tensors.  This can
                             help improve performance and memory utilization if
                             the original sparse gradient has high density.
                             Defaults to false.
            gradient_predivide_factor: gradient_predivide_factor splits the averaging
                                       before and after the sum. Gradients are scaled by
                                       1.0 / gradient_predivide_factor before the sum and
                                       gradient_predivide_factor / size after the sum.
            op: The reduction operation to use when combining gradients across
                different ranks. Defaults to Average.
            backward_passes_per_step: Number of backward passes to perform before calling
                                      hvd.allreduce. This allows accumulating updates over
                                      multiple mini-batches before reducing and applying them.
            average_aggregated_gradients: Whether to average the aggregated gradients that
                                          have been accumulated over multiple mini-batches.
                                          If true divides gradient updates by
                                          backward_passes_per_step.
                                          Only applicable for backward_passes_per_step > 1.
            num_groups: (Deprecated) Number of groups to assign gradient allreduce ops to
                        for explicit grouping. Defaults to no explicit groups.
            groups: The parameter to group the gradient allreduce ops. Accept values is a
                    non-negative integer or a list of list of tf.Variable.
                    If groups is a non-negative integer, it is the number of groups to assign
                    gradient allreduce ops to for explicit grouping.
                    If groups is a list of list of tf.Variable. Variables in the same
                    inner list will be assigned to the same group, while parameter that does
                    not appear in any list will form a group itself.
                    Defaults as None, which is no explicit groups.
            process_set: Gradients will only be reduced over Horovod processes belonging
                         to this process set. Defaults to the global process set.
            scale_local_gradients: Whether to scale the gradients of local variables.
                                   Default is set to True.

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
        """
        An optimizer that wraps another keras.optimizers.Optimizer, using an allreduce to
        average gradient values before applying gradients to model weights, except for
        the trainable weights of `local_layers` (a layer or a list of layers), whose
        gradients stay local to each rank (scaled by 1 / size when
        `scale_local_gradients`). The other arguments are DistributedOptimizer's.
        """
        return _impl.create_partial_distributed_optimizer(
            keras, optimizer, local_layers, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)

    def broadcast_global_variables(root_rank):
        """Broadcasts all global variables from root rank to all other processes.

        Only in tf.compat.v1 graph mode: TensorFlow 2 has no global variables,
        so eagerly this raises RuntimeError; use
        callbacks.BroadcastGlobalVariablesCallback(root_rank) in model.fit.

        Arguments:
            root_rank: Rank of the process from which global variables will be broadcasted
                       to all other processes.
        """
        return _impl.broadcast_global_variables(keras, root_rank)

    def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
                  compression=Compression.none):
        """
        Perform an allreduce on a tensor-compatible value.

        Arguments:
            value: A tensor-compatible value to reduce.
                   The shape of the input must be identical across all ranks.
            name: Optional name for the constants created by this operation.
            average:
                .. warning:: .. deprecated:: 0.19.0

                    Use `op` instead. Will be removed in v1.0.
            prescale_factor: Multiplicative factor to scale tensor before allreduce.
            postscale_factor: Multiplicative factor to scale tensor after allreduce.
            op: The reduction operation to combine tensors across different ranks.
                Defaults to Average if None is given.
            compression: Compression algorithm used to reduce the amount of data
                         sent and received by each worker node.  Defaults to not
                         using compression.
        """
        return _impl.allreduce(keras, value, name, average, prescale_factor, postscale_factor, op, compression)

    def allgather(value, name=None):
        """
        Perform an allgather on a tensor-compatible value.

        The concatenation is done on the first dimension, so the input values on the
        different processes must have the same rank and shape, except for the first
        dimension, which is allowed to be different.

        Arguments:
            value: A tensor-compatible value to gather.
            name: Optional name prefix for the constants created by this operation.
        """
        return _impl.allgather(keras, value, name)

    def broadcast(value, root_rank, name=None):
        """
        Perform a broadcast on a tensor-compatible value.

        Arguments:
            value: A tensor-compatible value to reduce.
                   The shape of the input must be identical across all ranks.
            root_rank: Rank of the process from which global variables will be
                       broadcasted to all other processes.
            name: Optional name for the constants created by this operation.
        """
        return _impl.broadcast(keras, value, root_rank, name)

    def reducescatter(value, name=None, op=Average):
        """
        Perform a reducescatter on a tensor-compatible value.

        Arguments:
            value: A tensor-compatible value to reduce and scatter.
                   The shape of the input must be identical across all ranks.
            name: Optional name for the constants created by this operation.
            op: The reduction operation to combine tensors across different ranks.
                Defaults to Average.
        """
        return _impl.reducescatter(keras, value, name, op)

    def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
        """
        Loads a saved Keras model with a Horovod DistributedOptimizer.

        The DistributedOptimizer will wrap the underlying optimizer used to train
        the saved model, so that the optimizer state (params and weights) will
        be picked up for retraining.

        By default, all optimizers in the module `keras.optimizers` will be loaded
        and wrapped without needing to specify any `custom_optimizers` or
        `custom_objects`.

        Arguments:
            filepath: One of the following:
                - string, path to the saved model, or
                - h5py.File object from which to load the model
            custom_optimizers: Optional list of Optimizer subclasses to support
                during loading.
            custom_objects: Optional dictionary mapping names (strings) to custom
                classes or functions to be considered during deserialization.
            compression: Compression algorithm used to reduce the amount of data
                         sent and received by each worker node.  Defaults to not
                         using compression.

        Returns:
            A Keras model instance.

        Raises:
            ImportError: If h5py is not available.
            ValueError: In case of an invalid savefile.
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
