# sync_batch_norm.py - Keras batch normalization whose training-time batch
# statistics cover the samples of every rank, not only the local batch.
# One Sum allreduce per call carries each rank's sample count, sum and sum
# of squares, so ranks may hold batches of different sizes and the result
# equals BatchNormalization on the concatenated batch. Gradients flow back
# through the allreduce (its gradient is registered in mpi_ops), so the
# input gradients are those of the concatenated batch as well. Inference
# uses the moving statistics and communicates nothing.
"""Synchronous batch normalization across Horovod ranks (Keras layer)."""

import tensorflow as tf

from horovod.tensorflow.mpi_ops import Sum, _allreduce, global_process_set

__all__ = ["SyncBatchNormalization"]


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """Synchronous batch normalization. Stats are synchronized across all workers during training."""

    def __init__(self, fused=False, **kwargs):
        """Takes BatchNormalization's arguments (Keras 3: `axis`, `momentum`,
        `epsilon`, `center`, `scale`, initializers, ...).

        Args:
            fused: must stay False (as in Horovod): a fused kernel computes
                the statistics inside one op, with no place to synchronize them.
        """
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if kwargs.pop("synchronized", False):
            # Keras' own synchronized=True needs a tf.distribute strategy;
            # this layer is the Horovod way of doing the same.
            raise ValueError("SyncBatchNormalization is already synchronized across Horovod ranks; "
                             "do not pass synchronized=True")
        if not kwargs.get("name", None):
            kwargs["name"] = "sync_batch_normalization"
        self._process_set = kwargs.pop("process_set", global_process_set)
        if "fused" in _base_init_arguments():
            kwargs["fused"] = False
        super(SyncBatchNormalization, self).__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        # Keras 3 calls _moments(inputs, mask); tf-keras (Keras 2) calls
        # _moments(inputs, reduction_axes, keep_dims=...). The local moments
        # come from the base class either way; only the sample count differs.
        mean, variance = super(SyncBatchNormalization, self)._moments(inputs, *args, **kwargs)
        if not self._process_set.included() or self._process_set.size() <= 1:
            return mean, variance
        count = self._local_count(inputs, *args, **kwargs)

        shape = tf.shape(mean)
        mean_flat = tf.reshape(mean, [-1])
        count = tf.cast(count, mean.dtype)
        # Per-rank (n*mean, n*E[x^2]) and n; their sums give the statistics of
        # the concatenated batch. A rank with an empty batch adds zeros.
        local = tf.concat([mean_flat * count,
                           (tf.reshape(variance, [-1]) + tf.square(mean_flat)) * count,
                           tf.reshape(count, [1])], axis=0)
        total = _allreduce(local, op=Sum, process_set=self._process_set)
        channels = tf.size(mean_flat)
        n = total[-1]
        group_mean = total[:channels] / n
        group_variance = tf.maximum(total[channels:2 * channels] / n - tf.square(group_mean), 0.0)
        return tf.reshape(group_mean, shape), tf.reshape(group_variance, shape)

    def _local_count(self, inputs, *args, **kwargs):
        """Number of samples per channel that went into this rank's moments."""
        mask = kwargs.get("mask", args[0] if args and not isinstance(args[0], (list, tuple)) else None)
        if mask is not None and len(mask.shape) == len(inputs.shape) - 1:
            # Keras 3's masked moments weigh each position by the mask, which
            # spans every axis but the channel axis.
            return tf.reduce_sum(tf.cast(mask, inputs.dtype))
        if args and isinstance(args[0], (list, tuple)):
            axes = list(args[0])
        elif "reduction_axes" in kwargs:
            axes = list(kwargs["reduction_axes"])
        else:
            axes = list(self._reduction_axes)
        dims = tf.shape(inputs)
        return tf.reduce_prod(tf.gather(dims, axes))


def _base_init_arguments():
    import inspect
    try:
        return inspect.signature(tf.keras.layers.BatchNormalization.__init__).parameters
    except (TypeError, ValueError):
        return {}
