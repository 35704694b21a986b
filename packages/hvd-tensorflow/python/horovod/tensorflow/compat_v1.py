# compat_v1.py - the tf.compat.v1 (TF1 graph mode) helpers: broadcasting
# every global variable, directly or from a SessionRunHook once a
# MonitoredSession has created its session.
"""Variable broadcasts for tf.compat.v1 graph-mode training."""

import tensorflow as tf

from horovod.tensorflow.functions import broadcast_variables
from horovod.tensorflow.util import _executing_eagerly


def broadcast_global_variables(root_rank):
    """Copies the value of every global variable from `root_rank` to all other ranks (graph mode only;
    under eager execution it raises RuntimeError).

    **NOTE:** deprecated in TensorFlow 2.0.

    Arguments:
        root_rank: the rank whose variable values are sent to the others.
    """
    if _executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """SessionRunHook that, once the session has been created, copies every global variable from
    `root_rank` to all other ranks.

    This gives all workers the same starting point, whether the weights were initialised
    randomly or restored from a checkpoint.

    **NOTE:** deprecated in TensorFlow 2.0.
    """

    def __init__(self, root_rank, device=''):
        """Creates the hook.

        Args:
          root_rank:
            The rank whose values are sent; every other rank receives them.
          device:
            Device on which the broadcast ops are placed.
        """
        super(BroadcastGlobalVariablesHook, self).__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        # A MonitoredSession may build a fresh graph (e.g. after a restart):
        # the op must belong to the graph being run.
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
