# tensorflow/keras/callbacks.py - Horovod's Keras callbacks for tf.keras
# (Keras 3 or tf-keras); the classes are made in horovod._keras.callbacks.
"""Horovod's Keras callbacks (``horovod.tensorflow.keras.callbacks``)."""

import tensorflow as tf

import horovod._keras.callbacks as _impl
from horovod._keras.api import publish

_keras = tf.keras

# BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateScheduleCallback,
# LearningRateWarmupCallback, BestModelCheckpoint
publish(globals(), _impl.make_callback_classes(_keras))
