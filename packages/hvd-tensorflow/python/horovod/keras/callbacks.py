# keras/callbacks.py - Horovod's Keras callbacks for standalone Keras 3
# (`import keras`); the classes are made in horovod._keras.callbacks.
"""Horovod's Keras callbacks (``horovod.keras.callbacks``)."""

import keras as _keras

import horovod._keras.callbacks as _impl
from horovod._keras.api import publish

# BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateScheduleCallback,
# LearningRateWarmupCallback, BestModelCheckpoint
publish(globals(), _impl.make_callback_classes(_keras))
