# _keras/elastic.py - Horovod's Keras elastic classes (KerasState and the
# callbacks that keep it current during model.fit), written once and bound to
# a given `keras` by horovod.tensorflow.keras.elastic and horovod.keras.elastic.
"""Shared implementation of the Keras elastic state and callbacks."""

from horovod.tensorflow.elastic import TensorFlowKerasState


class CommitStateCallbackImpl:
    def __init__(self, backend, state, batches_per_commit, *args):
        super().__init__(*args)
        self.backend = backend
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        # fit() starts again after every reset: every rank counts from here,
        # so the ranks keep committing in the same batches.
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.commit()

    def commit(self):
        self.state.commit()


class UpdateBatchStateCallbackImpl:
    def __init__(self, backend, state, *args):
        super().__init__(*args)
        self.backend = backend
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        # After a reset in the middle of an epoch, the first epoch of the new
        # fit() only has the batches the interrupted one had left.
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallbackImpl:
    def __init__(self, backend, state, *args):
        super().__init__(*args)
        self.backend = backend
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        # Keras numbers the epochs of each fit() from 0; the state counts
        # them across resets.
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # +1: the epoch is done, so a reset from here on resumes with the next.
        self.state.epoch = self.initial_epoch + epoch + 1


def make_elastic_classes(keras):
    """Horovod's Keras elastic classes bound to `keras`; a dict name -> class."""

    class KerasState(TensorFlowKerasState):
        """State of a Keras model and its optimizer, for ``hvd.elastic.run``.

        Args:
            model: a built Keras model.
            optimizer: the optimizer; the model's own (set by ``compile``) when omitted.
            kwargs: further values to track, by attribute name (``epoch=0, batch=0``, ...).
        """

        def __init__(self, model, optimizer=None, **kwargs):
            super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)

    class CommitStateCallback(CommitStateCallbackImpl, keras.callbacks.Callback):
        """Keras callback that commits `state` every `batches_per_commit` batches and at the end of
        every epoch."""

        def __init__(self, state, batches_per_commit=1):
            """Creates the callback.

            Args:
                state: the ``horovod.common.elastic.State`` to commit.
                batches_per_commit: how many batches pass between two commits (default 1).
            """
            super().__init__(keras.backend, state, batches_per_commit)

    class UpdateBatchStateCallback(UpdateBatchStateCallbackImpl, keras.callbacks.Callback):
        """Keras callback that keeps ``state.batch`` at the number of the last finished batch, and
        sets it back to 0 when an epoch ends.

        When fit() is given ``steps_per_epoch``, the first epoch after a reset is shortened by the
        batches the interrupted epoch had already done.
        """

        def __init__(self, state):
            """Creates the callback.

            Args:
                state: the ``horovod.common.elastic.State`` whose ``batch`` is kept current.
            """
            super().__init__(keras.backend, state)

    class UpdateEpochStateCallback(UpdateEpochStateCallbackImpl, keras.callbacks.Callback):
        """Keras callback that sets ``state.epoch`` when an epoch ends, counting the epochs of
        earlier fit() calls (before resets) too."""

        def __init__(self, state):
            """Creates the callback.

            Args:
                state: the ``horovod.common.elastic.State`` whose ``epoch`` is kept current.
            """
            super().__init__(keras.backend, state)

    return {cls.__name__: cls for cls in (KerasState, CommitStateCallback, UpdateBatchStateCallback,
                                          UpdateEpochStateCallback)}
