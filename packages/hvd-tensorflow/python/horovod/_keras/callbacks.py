# _keras/callbacks.py - what Horovod's Keras callbacks do, written once for
# every Keras: each class here is a mixin that horovod.tensorflow.keras and
# horovod.keras combine with their own keras.callbacks.Callback (or
# ModelCheckpoint). Works on Keras 3 (Python-float hyperparameters, Keras
# variables) and on tf-keras (both optimizer generations).
"""Shared implementation of the Horovod Keras callbacks."""

import warnings

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from horovod.tensorflow.mpi_ops import Average, rank, size
from horovod._keras import get_value, optimizer_variables, tf_variables


def _model_variables(model):
    # Keras 3 keeps seed-generator and metric state in model.variables too;
    # everything a replica holds is made equal.
    return tf_variables(model.variables)


class BroadcastGlobalVariablesCallbackImpl:
    def __init__(self, keras, root_rank, device="", local_variables=None, *args):
        super().__init__(*args)
        self.keras = keras
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        # Matched by identity of the underlying tf.Variable: Keras 3 hands out
        # wrappers, and the model's variable list is unwrapped before use.
        self._local_ids = {id(v) for v in tf_variables(local_variables)}

    def _broadcast(self, variables):
        variables = [v for v in variables if v is not None and id(v) not in self._local_ids]
        if not variables:
            return

        # One function for all variables: their broadcasts are in flight
        # together (and fuse) instead of blocking one after the other.
        @tf.function
        def broadcast_all():
            with tf.device(self.device):
                hvd.broadcast_variables(variables, root_rank=self.root_rank)

        broadcast_all()

    def _model_and_optimizer_variables(self):
        variables = _model_variables(self.model)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            variables += tf_variables(optimizer_variables(optimizer))
        return variables

    def on_train_begin(self, logs=None):
        # Keras 3 builds the model and the optimizer before training starts:
        # broadcasting now makes even the first step start from rank 0's
        # weights (a step taken from different weights would mix them).
        if self.broadcast_done or not getattr(self.model, "built", True):
            return
        self._broadcast(self._model_and_optimizer_variables())

    def on_batch_end(self, batch, logs=None):
        # As Horovod: after the first batch, when every lazily created
        # variable (tf-keras optimizer slots, subclassed models) exists.
        if self.broadcast_done:
            return
        self._broadcast(self._model_and_optimizer_variables())
        self.broadcast_done = True


class MetricAverageCallbackImpl:
    def __init__(self, keras, device="", *args):
        super().__init__(*args)
        self.keras = keras
        self.device = device

    def _average_metrics_in_place(self, logs):
        if not logs:
            return
        # Sorted, so every rank packs the same metric into the same slot;
        # one allreduce carries all of them.
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "fiub")
        if not names:
            return
        values = tf.constant([float(np.asarray(logs[k])) for k in names], dtype=tf.float64)
        with tf.device(self.device):
            averaged = hvd.allreduce(values, op=Average, name="MetricAverageCallback")
        for k, v in zip(names, np.asarray(averaged).tolist()):
            logs[k] = v

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


class LearningRateScheduleCallbackImpl:
    def __init__(self, keras, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, *args):
        super().__init__(*args)
        self.keras = keras
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.initial_lr = initial_lr
        self.restore_momentum = None
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self._warned_momentum = False

        if not callable(multiplier):
            # A constant multiplier only makes sense per epoch.
            self.staircase = True
            constant = multiplier
            self.multiplier = lambda epoch: constant
        else:
            self.multiplier = multiplier

        if self.initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")

    def _autodetect_steps_per_epoch(self):
        params = self.params or {}
        if params.get("steps"):
            return params["steps"]
        if params.get("samples") and params.get("batch_size"):
            return params["samples"] // params["batch_size"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify the steps_per_epoch "
                         "parameter to the %s()." % self.__class__.__name__)

    def _momentum_variable(self, optimizer):
        """The optimizer's momentum when it is a variable the compiled train step reads, else None."""
        momentum = getattr(optimizer, "momentum", None)
        if momentum is None:
            return None
        if hasattr(momentum, "assign"):
            return momentum
        # Keras 3 and tf-keras' current optimizers keep momentum as a Python
        # float that the compiled train step captured when it was traced:
        # changing it now would not reach the step, so it is left alone.
        if not self._warned_momentum and get_value(momentum) != 0.0:
            self._warned_momentum = True
            warnings.warn("%s: momentum correction skipped: %s keeps momentum as a Python float, which a "
                          "compiled train step cannot see change (tf-keras' legacy optimizers keep it as a "
                          "variable). Pass momentum_correction=False to silence this."
                          % (self.__class__.__name__, type(optimizer).__name__))
        return None

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = get_value(optimizer.learning_rate)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr

        if self.momentum_correction:
            momentum = self._momentum_variable(optimizer)
            if momentum is not None and old_lr != 0.0:
                # Goyal et al. 2017: scale momentum by new_lr / old_lr for the
                # step in which the learning rate changes, then restore it.
                self.restore_momentum = get_value(momentum)
                momentum.assign(self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self._momentum_variable(self.model.optimizer).assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = get_value(self.model.optimizer.learning_rate)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch or
                self.end_epoch is not None and self.current_epoch >= self.end_epoch):
            return  # outside the adjustment window
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = get_value(self.model.optimizer.learning_rate)


class LearningRateWarmupCallbackImpl(LearningRateScheduleCallbackImpl):
    def __init__(self, keras, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0, *args):
        def multiplier(epoch):
            # Shifted by one step so that the last step of each epoch lands
            # on a round value (readable learning-rate plots); the warmup
            # goes linearly from initial_lr / size to initial_lr.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)

        super().__init__(keras, initial_lr, multiplier, 0, warmup_epochs, False, momentum_correction,
                         steps_per_epoch, *args)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, get_value(self.model.optimizer.learning_rate)))


class BestModelCheckpointImpl:
    """Saves only on rank 0: the other ranks hold the same replica and would
    race it for the same file."""

    _PLACEHOLDER = "hvd-best-model-placeholder.keras"

    def _rank0(self):
        return rank() == 0

    def on_train_begin(self, logs=None):
        if self.filepath is None or self.filepath == self._PLACEHOLDER:
            raise ValueError("BestModelCheckpoint: set `filepath` (where the best model is saved) before training")
        if self._rank0() and hasattr(super(), "on_train_begin"):
            super().on_train_begin(logs)

    def on_train_batch_end(self, batch, logs=None):
        if self._rank0():
            super().on_train_batch_end(batch, logs)

    def on_epoch_begin(self, epoch, logs=None):
        if self._rank0():
            super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self._rank0():
            super().on_epoch_end(epoch, logs)


def make_callback_classes(_keras):
    """Horovod's Keras callback classes bound to `_keras` (its Callback and ModelCheckpoint)."""

    class BroadcastGlobalVariablesCallback(BroadcastGlobalVariablesCallbackImpl, _keras.callbacks.Callback):
        """Keras callback that copies the model's (and the optimizer's) variables from `root_rank` to
        every other rank, so that all workers train from the same starting point, whether the
        weights were initialised randomly or restored from a checkpoint.

        The copy is made when training begins (for the variables that exist by then, so the first
        step already starts from root_rank's weights) and once more after the first batch, when
        lazily created variables such as optimizer slots exist too.
        """

        def __init__(self, root_rank, device='', local_variables=None):
            """Creates the callback.

            Args:
                root_rank: the rank whose values are sent; every other rank receives them.
                device: device on which the broadcasts run ('' leaves the placement to
                    TensorFlow).
                local_variables: A variable or a collection of variables that are
                        worker local and are therefore not broadcast; each rank
                        keeps its own values.
            """
            super().__init__(_keras, root_rank, device, local_variables)

    class MetricAverageCallback(MetricAverageCallbackImpl, _keras.callbacks.Callback):
        """Keras callback that, at the end of every epoch, replaces each scalar metric in the logs by its
        average over all ranks. Metric-driven callbacks such as ReduceLROnPlateau or TensorBoard then
        see the same numbers on every rank.

        It has to come before those callbacks in the callback list, so that they read the averaged
        values.
        """

        def __init__(self, device=''):
            """Creates the callback.

            Args:
                device: device on which the allreduce runs ('' leaves the placement to
                    TensorFlow).
            """
            super().__init__(_keras, device)

    class LearningRateScheduleCallback(LearningRateScheduleCallbackImpl, _keras.callbacks.Callback):
        """Keras callback that, from epoch `start_epoch` up to (not including) `end_epoch`, sets the
        optimizer's learning rate to `initial_lr * multiplier(epoch)`. `multiplier` is either a
        constant or a function of the epoch.

        With `staircase=True` (always the case for a constant `multiplier`) the rate is set at the
        start of each epoch and `multiplier` receives the integer epoch. With `staircase=False` it is
        set before every batch and `multiplier` receives a fractional epoch,
        `epoch + batch / steps_per_epoch`, for smooth schedules such as the one of
        `LearningRateWarmupCallback`.

        `initial_lr` is the optimizer's learning rate when training starts.
        """

        def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                     momentum_correction=True, steps_per_epoch=None):
            """Creates the callback.

            Args:
                initial_lr: the learning rate at the start of training (required: None raises
                    ValueError).
                multiplier: a constant factor, or a function mapping the epoch to a factor.
                start_epoch: first epoch the schedule applies to; 0 by default.
                end_epoch: epoch at which the schedule stops applying (not included); None, the
                    default, means no end.
                staircase: True to change the rate at the start of each epoch, False to change it
                    before every batch.
                momentum_correction: whether, in the step where the rate changes, the momentum of an
                    optimizer that keeps it in a variable is scaled by new_lr / old_lr. True by
                    default.
                steps_per_epoch: batches per epoch, needed when `staircase=False`; when omitted it
                    is taken from the parameters Keras passes to callbacks, and ValueError is raised
                    if they do not tell.
            """
            super().__init__(_keras, initial_lr, multiplier, start_epoch, end_epoch, staircase, momentum_correction,
                             steps_per_epoch)

    class LearningRateWarmupCallback(LearningRateWarmupCallbackImpl, _keras.callbacks.Callback):
        """Keras callback for a gradual learning-rate warmup: over the first `warmup_epochs` epochs
        the rate climbs linearly from `initial_lr / hvd.size()` to `initial_lr`.

        `initial_lr` is the rate the warmup ends at, usually the optimizer's configured learning rate.

        The idea comes from Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
        1 Hour" (https://arxiv.org/pdf/1706.02677.pdf).

        With a fractional epoch e = completed_epochs + batch / steps_per_epoch, the rate is

            lr(e) = initial_lr / size * (e * (size - 1) / warmup_epochs + 1)

        which is initial_lr / size at e = 0 and initial_lr at e = warmup_epochs. (The
        implementation evaluates it one step ahead, so each epoch's last step lands on a round
        value.)
        """

        def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
            """Creates the callback.

            Args:
                initial_lr: the learning rate reached at the end of the warmup.
                warmup_epochs: length of the warmup, in epochs; 5 by default.
                momentum_correction: whether, in the step where the rate changes, the momentum of an
                    optimizer that keeps it in a variable is scaled by new_lr / old_lr. True by
                    default.
                steps_per_epoch: batches per epoch; when omitted it is taken from the parameters
                    Keras passes to callbacks, and ValueError is raised if they do not tell.
                verbose: 0 for silence, 1 to print a line when the warmup ends.
            """
            super().__init__(_keras, initial_lr, warmup_epochs, momentum_correction, steps_per_epoch, verbose)

    class BestModelCheckpoint(BestModelCheckpointImpl, _keras.callbacks.ModelCheckpoint):
        """ModelCheckpoint that keeps only the best model seen so far, "best" being judged by `monitor`
        and `mode`. Only rank 0 writes the file.
        """

        def __init__(self, filepath=None, monitor='val_loss', verbose=0, mode='auto', save_freq='epoch'):
            """Args:
                filepath: Where the best model is saved (Keras 3: ending in `.keras` or `.h5`).
                          May be set on the callback later, before training starts.
                monitor: the logged quantity that decides which model is best.
                verbose: 0 for silence, 1 to report saves.
                mode: 'auto', 'min' or 'max': whether a lower or a higher value of `monitor` is
                      better ('auto' guesses from the metric's name).
                save_freq: 'epoch' to check after every epoch, or an integer N to check after every
                           N batches.
            """
            super().__init__(filepath=filepath or self._PLACEHOLDER, monitor=monitor, verbose=verbose,
                             save_best_only=True, save_weights_only=False, mode=mode, save_freq=save_freq)
            if filepath is None:
                self.filepath = None

    return {cls.__name__: cls for cls in (BroadcastGlobalVariablesCallback, MetricAverageCallback,
                                          LearningRateScheduleCallback, LearningRateWarmupCallback,
                                          BestModelCheckpoint)}
