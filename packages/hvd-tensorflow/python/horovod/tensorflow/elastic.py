# elastic.py - elastic training for TensorFlow: TensorFlowKerasState (a Keras
# model and its optimizer), TensorFlowState (a list of tf.Variables) and the
# @hvd.elastic.run decorator. The loop itself is horovod.common.elastic's;
# this module adds how TF state is copied, restored and broadcast, in eager
# mode and in tf.compat.v1 graph mode (through a session).
"""Elastic training with TensorFlow (``hvd.elastic``)."""

import contextlib
import re

import tensorflow as tf

from horovod.common.elastic import ObjectState, run_fn
from horovod.common.exceptions import HorovodInternalError
from horovod.tensorflow.functions import allgather_object, broadcast_object, broadcast_object_fn, broadcast_variables
from horovod.tensorflow.mpi_ops import init, rank, shutdown
from horovod.tensorflow.util import _executing_eagerly

__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]

# hvd's op kernels report a failed job (a peer died or left, the engine was
# shut down) as tf.errors.UnknownError "<op type>: <reason>".
_HVD_OP_FAILURE = re.compile(r"\bHorovod[A-Za-z]+: ")


def _reset():
    shutdown()
    init()


def run(func):
    """Decorator for an elastic training function ``func(state, *args, **kwargs)``.

    ``state`` (a ``TensorFlowKerasState``, ``TensorFlowState`` or other
    ``horovod.common.elastic.State``) is made equal on every rank before ``func``
    starts. When a worker fails, the others roll the state back to its last
    ``commit()``; when hosts are added or removed they keep it. In both cases every
    worker then rejoins the new set of workers, rank 0's state is copied to all, and
    ``func`` is called again from the start, so it should resume from what the state
    records (epoch, batch, ...). A failed hvd op inside a ``tf.function`` (which TF
    reports as ``tf.errors.UnknownError``) counts as a worker failure.

    Do not call a collective directly as ``func``: workers that join during a reset
    run the state synchronisation first, and would wait in it while the others run
    the collective.
    """
    def failures_as_internal_errors(state, *args, **kwargs):
        with _hvd_failures_as_internal_errors():
            return func(state, *args, **kwargs)
    return run_fn(failures_as_internal_errors, _reset)


@contextlib.contextmanager
def _hvd_failures_as_internal_errors():
    # TF reports a failed hvd op as UnknownError("Horovod<Op>: ..."); the
    # elastic loop recovers from HorovodInternalError only.
    try:
        yield
    except tf.errors.UnknownError as e:
        if _HVD_OP_FAILURE.search(e.message or ""):
            raise HorovodInternalError(e.message) from e
        raise


def _session(session):
    return session or tf.compat.v1.get_default_session()


def _graph_session_or_fail(session, what):
    session = _session(session)
    if session is None:
        raise ValueError("%s in tf.compat.v1 graph mode needs a session: pass session= or create the state "
                         "inside `with tf.compat.v1.Session() as session:`" % what)
    return session


class TensorFlowKerasState(ObjectState):
    """State of a Keras model and its optimizer (Keras 3 or tf-keras).

    Args:
        model: a built Keras model.
        optimizer: the optimizer; the model's own (``model.optimizer``, set by
            ``compile``) when omitted.
        backend: the Keras backend module; in tf.compat.v1 graph mode its session
            runs the broadcasts. Not needed when executing eagerly.
        kwargs: further values to track, by attribute name (``epoch=0``, ...).
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        self._save_model()
        if _executing_eagerly() or backend is None:
            bcast_object = broadcast_object
        else:
            # One broadcast op, built now and run at each sync: building one per
            # sync would grow the graph every reset.
            self._graph_bcast_op = broadcast_variables(self._variables(), root_rank=0)
            bcast_object = broadcast_object_fn(session=backend.get_session())
        super().__init__(bcast_object=bcast_object, get_rank=rank, **kwargs)

    def _variables(self):
        from horovod._keras import optimizer_variables, tf_variables
        variables = tf_variables(self.model.variables)
        if self.optimizer is not None:
            variables += tf_variables(optimizer_variables(self.optimizer))
        return variables

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        with _hvd_failures_as_internal_errors():
            if _executing_eagerly() or self.backend is None:
                # Read now: the optimizer may have created its slots since the
                # state was made.
                broadcast_variables(self._same_variables_on_every_rank(), root_rank=0)
            else:
                self.backend.get_session().run(self._graph_bcast_op)
            self._save_model()
            super().sync()

    def _same_variables_on_every_rank(self):
        # A worker that joins a running job has an optimizer that has not
        # stepped yet; Keras creates its slot variables lazily, so it would
        # have fewer variables than rank 0 and wait in a broadcast the others
        # never make (Horovod issue 2652). Building the optimizer creates them.
        optimizer = self.optimizer
        if optimizer is not None and hasattr(optimizer, "build"):
            built = getattr(optimizer, "built", None)
            if built is None:
                built = getattr(optimizer, "_built", False)  # tf-keras
            if not built:
                optimizer.build(self.model.trainable_variables)
        variables = self._variables()
        counts = allgather_object(len(variables), name="elastic.state_variable_count")
        if len(set(counts)) > 1:
            raise ValueError("TensorFlowKerasState.sync: the ranks track different numbers of variables %s "
                             "(model and optimizer); rank 0's cannot be copied to the others. Build the model "
                             "and optimizer the same way on every rank before training." % counts)
        return variables

    def _save_model(self):
        if _executing_eagerly():
            self._saved_values = [tf.identity(v) for v in self._variables()]
        else:
            session = self.backend.get_session() if self.backend is not None else _session(None)
            self._saved_values = session.run(self._variables())

    def _load_model(self):
        # An optimizer that built its slots after the save has more variables
        # than were saved: those keep their values (Keras appends them).
        variables = self._variables()
        if _executing_eagerly():
            for variable, value in zip(variables, self._saved_values):
                variable.assign(value)
        else:
            session = self.backend.get_session() if self.backend is not None else _session(None)
            for variable, value in zip(variables, self._saved_values):
                variable.load(value, session)


class TensorFlowState(ObjectState):
    """State of a list of tf.Variables.

    Args:
        variables: the variables to track; in tf.compat.v1 graph mode every global
            variable when omitted.
        session: in graph mode, the session that holds the variables' values (the
            default session when omitted).
        kwargs: further values to track, by attribute name (``epoch=0``, ...).
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None:
            if _executing_eagerly():
                raise ValueError("TensorFlowState needs variables= when executing eagerly (TensorFlow 2 has no "
                                 "global variables)")
            variables = tf.compat.v1.global_variables()
        self.variables = list(variables)
        self.session = session
        if _executing_eagerly():
            bcast_object = broadcast_object
        else:
            self._graph_bcast_op = broadcast_variables(self.variables, root_rank=0)
            bcast_object = broadcast_object_fn(session=session)
        self._save_model()
        super().__init__(bcast_object=bcast_object, get_rank=rank, **kwargs)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        with _hvd_failures_as_internal_errors():
            if _executing_eagerly():
                broadcast_variables(self.variables, root_rank=0)
            else:
                _graph_session_or_fail(self.session, "TensorFlowState.sync()").run(self._graph_bcast_op)
            self._save_model()
            super().sync()

    def _save_model(self):
        if _executing_eagerly():
            self._values = [v.numpy() for v in self.variables]
        else:
            self._values = _graph_session_or_fail(self.session, "TensorFlowState").run(self.variables)

    def _load_model(self):
        if _executing_eagerly():
            for variable, value in zip(self.variables, self._values):
                variable.assign(value)
        else:
            session = _graph_session_or_fail(self.session, "TensorFlowState.restore()")
            for variable, value in zip(self.variables, self._values):
                variable.load(value, session)
