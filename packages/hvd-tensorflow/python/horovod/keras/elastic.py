# keras/elastic.py - Horovod's Keras elastic classes for standalone Keras 3
# (`import keras`); made in horovod._keras.elastic.
"""Elastic training with standalone Keras (``hvd.elastic``)."""

import keras as _keras

import horovod._keras.elastic as _impl
from horovod._keras.api import publish
from horovod.tensorflow.elastic import run  # noqa: F401

# KerasState, CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback
publish(globals(), _impl.make_elastic_classes(_keras))

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
