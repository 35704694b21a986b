# custom_ops.py - hvd's collectives as torch.library custom ops (hvd::allreduce,
# hvd::allgather, hvd::broadcast and the allgather gradient), with fake
# implementations and autograd formulas, so torch.compile(fullgraph=True)
# can put them in a graph. horovod.torch.mpi_ops routes to these ops only
# while Dynamo traces; eager calls go straight to the engine. The ops run
# the eager paths of horovod.torch._engine_bridge and the gradient formulas
# of mpi_ops; mpi_ops reaches the ops only through torch.ops.hvd, at call
# time, so nothing imports this module but horovod.torch itself.
"""torch.library registrations of hvd's collectives for torch.compile."""

import torch

from horovod.common.process_sets import ProcessSet, global_process_set
from horovod.torch._engine_bridge import _allgather_now, _allreduce_now, _broadcast_now
from horovod.torch.mpi_ops import _allgather_grad, _broadcast_grad

__all__ = ["allreduce", "allgather", "broadcast"]


def _process_set(process_set_id):
    """A ProcessSet for an id: ops carry the id because a schema holds only plain types."""
    if process_set_id == 0:
        return global_process_set
    process_set = ProcessSet([])
    process_set.process_set_id = process_set_id
    return process_set


def _name(name):
    # Schemas cannot say Optional[str] cheaply; "" means "let the engine name it".
    return name or None


@torch.library.custom_op("hvd::allreduce", mutates_args=())
def allreduce(tensor: torch.Tensor, op: int, name: str, prescale_factor: float, postscale_factor: float,
              process_set_id: int) -> torch.Tensor:
    """Allreduce of `tensor` (a new tensor); see horovod.torch.allreduce."""
    return _allreduce_now(tensor.contiguous(), op, _name(name), prescale_factor, postscale_factor,
                                  process_set_id)


@allreduce.register_fake
def _allreduce_fake(tensor, op, name, prescale_factor, postscale_factor, process_set_id):
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def _allreduce_setup(ctx, inputs, output):
    _, ctx.op, _, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set_id = inputs


def _allreduce_backward(ctx, grad):
    grad_input = torch.ops.hvd.allreduce(grad.contiguous(), ctx.op, "", ctx.prescale_factor,
                                         ctx.postscale_factor, ctx.process_set_id)
    return grad_input, None, None, None, None, None


allreduce.register_autograd(_allreduce_backward, setup_context=_allreduce_setup)


@torch.library.custom_op("hvd::allgather", mutates_args=())
def allgather(tensor: torch.Tensor, name: str, process_set_id: int) -> torch.Tensor:
    """Allgather of `tensor` along dimension 0; see horovod.torch.allgather."""
    return _allgather_now(tensor.contiguous(), _name(name), _process_set(process_set_id))


@allgather.register_fake
def _allgather_fake(tensor, name, process_set_id):
    # The other ranks' first dimensions are known only after negotiation.
    rows = torch.library.get_ctx().new_dynamic_size()
    return tensor.new_empty((rows,) + tuple(tensor.shape[1:]))


@torch.library.custom_op("hvd::allgather_grad", mutates_args=())
def allgather_grad(grad: torch.Tensor, rows: int, process_set_id: int) -> torch.Tensor:
    """The gradient of hvd::allgather for this rank's `rows` input rows."""
    # A fresh tensor: the narrowed view would alias (custom ops may not) and
    # start at an offset inductor's alignment checks reject.
    return _allgather_grad(grad.contiguous(), rows, _process_set(process_set_id)).clone()


@allgather_grad.register_fake
def _allgather_grad_fake(grad, rows, process_set_id):
    return grad.new_empty((rows,) + tuple(grad.shape[1:]))


def _allgather_setup(ctx, inputs, output):
    tensor, _, ctx.process_set_id = inputs
    ctx.rows = tensor.shape[0]


def _allgather_backward(ctx, grad):
    return torch.ops.hvd.allgather_grad(grad, ctx.rows, ctx.process_set_id), None, None


allgather.register_autograd(_allgather_backward, setup_context=_allgather_setup)


@torch.library.custom_op("hvd::broadcast", mutates_args=())
def broadcast(tensor: torch.Tensor, root_rank: int, name: str, process_set_id: int) -> torch.Tensor:
    """Broadcast of root's `tensor` (a new tensor); see horovod.torch.broadcast."""
    return _broadcast_now(tensor.contiguous(), root_rank, _name(name), process_set_id)


@broadcast.register_fake
def _broadcast_fake(tensor, root_rank, name, process_set_id):
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def _broadcast_setup(ctx, inputs, output):
    _, ctx.root_rank, _, ctx.process_set_id = inputs


@torch.library.custom_op("hvd::broadcast_grad", mutates_args=())
def broadcast_grad(grad: torch.Tensor, root_rank: int, process_set_id: int) -> torch.Tensor:
    """The gradient of hvd::broadcast: as eager HorovodBroadcast's."""
    # One op rather than allreduce-then-zero in the graph: a graph that
    # differs by rank could be optimised differently on each rank (the
    # compiler may fold `x * 0` and drop the allreduce on non-root ranks only).
    return _broadcast_grad(grad.contiguous(), root_rank, _process_set(process_set_id))


@broadcast_grad.register_fake
def _broadcast_grad_fake(grad, root_rank, process_set_id):
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


def _broadcast_backward(ctx, grad):
    return torch.ops.hvd.broadcast_grad(grad, ctx.root_rank, ctx.process_set_id), None, None, None


broadcast.register_autograd(_broadcast_backward, setup_context=_broadcast_setup)


def _keep_in_graph():
    """Marks every hvd op as side-effecting, so the compiler never drops one
    whose result is unused: every rank must run the same collectives."""
    try:
        from torch.fx.node import has_side_effect
    except ImportError:  # older torch: dead-code elimination may drop unused results
        return
    for op in (torch.ops.hvd.allreduce, torch.ops.hvd.allgather, torch.ops.hvd.allgather_grad,
               torch.ops.hvd.broadcast, torch.ops.hvd.broadcast_grad):
        has_side_effect(op.default)


_keep_in_graph()
