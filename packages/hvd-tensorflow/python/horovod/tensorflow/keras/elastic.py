# tensorflow/keras/elastic.py - Horovod's Keras elastic classes for tf.keras
# (Keras 3, or tf-keras); made in horovod._keras.elastic.
"""Elastic training with ``tf.keras`` (``hvd.elastic``)."""

import tensorflow as tf

import horovod._keras.elastic as _impl
from horovod._keras.api import publish
from horovod.tensorflow.elastic import run  # noqa: F401

# KerasState, CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback
publish(globals(), _impl.make_elastic_classes(tf.keras))

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
