# state.py - TorchState: an ObjectState whose attributes of known torch types
# (modules, optimizers, ElasticSamplers) are saved, restored and broadcast
# through their state_dict, and everything else as a plain Python value.
"""``TorchState`` and the per-type handlers it uses."""

import copy

import torch

from horovod.common.elastic import ObjectState
from horovod.torch.elastic.sampler import ElasticSampler
from horovod.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from horovod.torch.mpi_ops import rank


class StateHandler:
    """Keeps one tracked value's saved copy; subclasses say how to copy and share it."""

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after every reset, before any sync (which may be skipped)."""

    def set_value(self, value):
        """Tracks a new object (assigned to the state's attribute); it is saved at once."""
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """For objects with state_dict()/load_state_dict(): the saved copy is a deep copy
    of the state dict (tensors included, so later in-place updates do not reach it)."""

    def __init__(self, value):
        super().__init__(value)
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)


class ModelStateHandler(_StateDictHandler):
    """A torch.nn.Module: its parameters and buffers."""

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    """A torch.optim.Optimizer: hyperparameters and per-parameter state."""

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(_StateDictHandler):
    """An ElasticSampler: its epoch and how far into it the job got."""

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))

    def reset(self):
        # After a reset that only removed hosts the ranks skip the sync, but
        # the unprocessed rest of the epoch must still be split over the new
        # number of ranks (every rank counted the same processed samples).
        self.value.reset()


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The (type, handler class) pairs TorchState looks values up in, first match wins."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the (type, handler class) pairs, e.g. to handle a type of your own."""
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for value_type, handler_class in _handler_registry:
        if isinstance(value, value_type):
            return handler_class(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch training process.

    Every keyword argument becomes an attribute. Modules, optimizers and
    ElasticSamplers (any number of each) are tracked through their state dicts;
    other values are saved and broadcast as picklable objects.

    Args:
        model: optional torch.nn.Module.
        optimizer: optional torch.optim.Optimizer.
        kwargs: further values to track, by attribute name.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def sync(self):
        # What rank 0 sent is the state every rank agrees on: a restore
        # before the next commit goes back to it, not to this rank's own
        # state from before the sync.
        for handler in self._handlers.values():
            handler.sync()
            handler.save()
        super().sync()

    def __setattr__(self, name, value):
        # Assigning a new model/optimizer/sampler to a tracked attribute
        # tracks (and saves) the new object.
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
