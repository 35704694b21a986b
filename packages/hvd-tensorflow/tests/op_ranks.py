# op_ranks.py - runs a function of a module in rank_programs/ as N real hvd
# ranks (horovod.common.testing) for the TF op-layer tests; TensorFlow is
# kept quiet and to one OpenMP thread, and each rank program limits TF's own
# threads (rank_programs/tensorflow_threads.py), since ranks share two cores.
"""Helpers to run TensorFlow rank programs as N real hvd ranks."""

import os

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))

ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}


def run_program(size, target, timeout=180, env=None, **kwargs):
    """Runs rank_programs.<target> ("module:function") as `size` ranks; returns a RankResult per rank.

    `env` is added to ENV; `kwargs` are testing.run_program()'s (`kwargs=` for the function, ...).
    """
    return testing.run_program(size, "rank_programs." + target, path=HERE, timeout=timeout,
                               env=dict(ENV, **(env or {})), **kwargs)


def run_program_ok(size, target, timeout=180, env=None, **kwargs):
    """Like run_program(), but every rank must exit 0; returns what each rank reported."""
    return testing.run_program_ok(size, "rank_programs." + target, path=HERE, timeout=timeout,
                                  env=dict(ENV, **(env or {})), **kwargs)
