# horovod/torch/elastic - elastic training for PyTorch: TorchState (model,
# optimizer, sampler and plain values that survive a reset), ElasticSampler
# and the @hvd.elastic.run decorator. The loop itself is horovod.common.elastic's.
"""Elastic training with PyTorch (``hvd.elastic``)."""

from horovod.common.elastic import run_fn
from horovod.torch.elastic.sampler import ElasticSampler
from horovod.torch.elastic.state import TorchState
from horovod.torch.mpi_ops import init, shutdown

__all__ = ["TorchState", "ElasticSampler", "run"]


def _reset():
    shutdown()
    init()


def run(func):
    """Decorator for an elastic training function ``func(state, *args, **kwargs)``.

    ``state`` (a ``TorchState`` or other ``horovod.common.elastic.State``) is made
    equal on every rank before ``func`` starts. When a worker fails, the others roll
    the state back to its last ``commit()``; when hosts are added or removed they
    keep it. In both cases every worker then rejoins the new set of workers, rank
    0's state is copied to all, and ``func`` is called again from the start, so it
    should resume from what the state records (epoch, batch, ...).

    Do not call a collective directly as ``func``: workers that join during a reset
    run the state synchronisation first, and would wait in it while the others run
    the collective.
    """
    return run_fn(func, _reset)
