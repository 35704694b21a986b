# tensorflow_threads.py - the thread limits every TensorFlow rank program
# sets before its first op: ranks share two cores, so more threads would
# only contend.
"""TensorFlow thread limits for rank programs."""

import tensorflow as tf


def limit():
    """Two inter-op threads, and one thread inside each op."""
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)
