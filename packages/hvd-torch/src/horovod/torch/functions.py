# functions.py - helpers that put every rank in the same starting state:
# model parameters and optimizer state (tensors and Python scalars alike),
# built on the tensor collectives, and arbitrary picklable objects, which
# travel through hvd-core's object collectives shared by every binding.
"""Broadcast and gather helpers for models, optimizers and Python objects."""

import collections

import torch

from horovod.common import collectives as _common_collectives
from horovod.common.process_sets import global_process_set
from horovod.torch._engine_bridge import raising_torch_errors
from horovod.torch.mpi_ops import broadcast_async_, rank, synchronize

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites the given tensors on every rank with `root_rank`'s values, for instance to start
    all replicas from the same ``model.state_dict()`` or the same parameters.

    Arguments:
        params: either a dict from names to tensors (such as ``model.state_dict()``), or a
            list of tensors or of (name, tensor) pairs (such as
            ``list(model.named_parameters())`` or ``list(model.parameters())``). Anything else
            raises ValueError.
        root_rank: the rank whose values are sent to the others.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
    """
    if isinstance(params, dict):
        # Sorted so every rank submits the same names whatever its dict order.
        params = sorted(params.items())
    elif isinstance(params, list):
        # Accept both named_parameters() pairs and bare parameters().
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))

    # All broadcasts are started before any is waited on, so the engine can
    # fuse them into a few large transfers.
    handles = []
    for name, p in params:
        if p is None:
            continue
        handles.append(broadcast_async_(p.data if isinstance(p, torch.nn.Parameter) else p, root_rank, name,
                                        process_set=process_set))
    for handle in handles:
        synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes the optimizer's state (its per-parameter tensors and scalars, and the options of its
    parameter groups) on every rank equal to that of `root_rank`.

    Arguments:
        optimizer: the torch.optim optimizer whose state is synchronized (LBFGS is not
            supported and raises ValueError).
        root_rank: the rank whose optimizer state is sent to the others.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        # LBFGS keeps its history in lists of tensors of varying length.
        raise ValueError("cannot broadcast torch.optim.LBFGS state")

    # Horovod first takes a step with zero gradients when the state is
    # empty, only so that every rank has tensors to receive into. That step
    # counts (Adam's bias correction then differs from a single-process run)
    # and can move the model (weight decay). It is not needed here: the
    # root's layout below tells the other ranks what to allocate, and a root
    # without state means every rank starts without state, identically.
    params = [p for group in optimizer.param_groups for p in group["params"]]
    is_root = rank() == root_rank

    # What Horovod's initialisation step leaves behind that scripts can see:
    # on a rank whose optimizer has no state yet, every trainable parameter
    # has a (zero) gradient afterwards, and frozen ones still have none.
    # Code written against Horovod reads or broadcasts p.grad right after
    # this call. The zeros add nothing to the first backward's gradients and
    # zero_grad() clears them; DistributedOptimizer gives a parameter without
    # a gradient zeros at step() anyway. Gradients that already exist are kept.
    if not any(optimizer.state.get(p) for p in params):
        sparse = isinstance(optimizer, torch.optim.SparseAdam)
        for p in params:
            if p.requires_grad and p.grad is None:
                zeros = torch.zeros_like(p, memory_format=torch.contiguous_format)
                p.grad = zeros.to_sparse() if sparse else zeros

    # The root describes its state first: which parameters have state, the
    # names, shapes and dtypes of the tensors, and every Python scalar (step
    # counts, hyper-parameters such as lr, betas, or None-valued options).
    # Horovod wraps each scalar in a tensor, broadcasts it and casts it back;
    # carrying them in one pickled description gives the same values with
    # their exact types, also for None and strings, and lets a rank whose
    # state lacks a parameter (never stepped, or a fresh process) allocate
    # the tensors it is about to receive, so the tensor broadcasts below
    # always match across ranks.
    layout = None
    if is_root:
        layout = {"param_groups": [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
                  "state": {}}
        for index, p in enumerate(params):
            state = optimizer.state.get(p)
            if not state:
                continue
            entry = {}
            for key, value in state.items():
                if torch.is_tensor(value):
                    entry[key] = ("tensor", tuple(value.shape), value.dtype)
                else:
                    entry[key] = ("value", value)
            layout["state"][index] = entry
    layout = broadcast_object(layout, root_rank, name="broadcast_optimizer_state.layout",
                              process_set=process_set)

    for group, options in zip(optimizer.param_groups, layout["param_groups"]):
        group.update(options)

    tensors = []
    occurrences = collections.defaultdict(int)
    for index, p in enumerate(params):
        entry = layout["state"].get(index)
        if entry is None:
            optimizer.state.pop(p, None)
            continue
        state = optimizer.state[p]
        for key in [k for k in state if k not in entry]:
            del state[key]
        for key, spec in entry.items():
            if spec[0] == "value":
                state[key] = spec[1]
                continue
            _, shape, dtype = spec
            value = state.get(key)
            if not torch.is_tensor(value) or tuple(value.shape) != shape or value.dtype != dtype:
                device = value.device if torch.is_tensor(value) else p.device
                state[key] = torch.empty(shape, dtype=dtype, device=device)
            elif not state[key].is_contiguous():
                state[key] = state[key].contiguous()
            # Names as Horovod's: the state key and its occurrence count, so
            # the n-th "exp_avg" is the same tensor on every rank.
            occurrences[key] += 1
            tensors.append(("%s.%d" % (key, occurrences[key]), state[key]))

    broadcast_parameters(tensors, root_rank, process_set=process_set)


# hvd-core's implementations, failing with torch's error classes.
_broadcast_object = raising_torch_errors(_common_collectives.broadcast_object)
_allgather_object = raising_torch_errors(_common_collectives.allgather_object)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Sends a picklable Python object from `root_rank` to every rank of the process set and returns
    it there. A common use is sharing ``optimizer.state_dict()``:

    .. code-block:: python

        state = broadcast_object(optimizer.state_dict(), root_rank=0)
        if hvd.rank() != 0:
            optimizer.load_state_dict(state)

    Arguments:
        obj: the object to send; it must survive a pickle round trip (cloudpickle is used
            when installed). Only the root's value matters.
        root_rank: the rank whose object is sent to the others.
        name: optional name of the broadcast; "broadcast_object" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.
    Returns:
        The root rank's object (on the root, `obj` itself).
    """
    # The bytes travel as numpy arrays through hvd-core, so every binding
    # accepts the same objects and sends the same payloads.
    return _broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Collects a picklable Python object from every rank of the process set.

    Arguments:
        obj: this rank's object; it must survive a pickle round trip (cloudpickle is used
            when installed).
        name: optional name of the allgather; "allgather_object" unless given. It must be
            the same on every rank.
        process_set: the ProcessSet whose ranks take part; the global process set (all
            ranks) unless given.

    Returns:
        A list of the ranks' objects, in rank order.
    """
    return _allgather_object(obj, name, process_set)
