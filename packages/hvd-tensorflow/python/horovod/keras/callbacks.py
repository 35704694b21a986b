# keras/callbacks.py - Horovod's Keras callbacks for standalone Keras 3
# (`import keras`); the classes are made in horovod._keras.callbacks.
"""Horovod's Keras callbacks (``horovod.keras.callbacks``)."""

import keras as _keras

import horovod._keras.callbacks as _impl

_classes = _impl.make_callback_classes(_keras)
for _name, _cls in _classes.items():
    # importable (and picklable) under this module's name
    _cls.__module__, _cls.__qualname__ = __name__, _name

BroadcastGlobalVariablesCallback = _classes["BroadcastGlobalVariablesCallback"]
MetricAverageCallback = _classes["MetricAverageCallback"]
LearningRateScheduleCallback = _classes["LearningRateScheduleCallback"]
LearningRateWarmupCallback = _classes["LearningRateWarmupCallback"]
BestModelCheckpoint = _classes["BestModelCheckpoint"]

del _name, _cls, _classes
