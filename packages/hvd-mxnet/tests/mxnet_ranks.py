# mxnet_ranks.py - runs N real hvd ranks (horovod.common.testing) for
# hvd-mxnet's tests: a function of a module in rank_programs/.
"""Helpers to run rank programs as N real hvd ranks."""

import os

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))
# Ranks share two cores: MXNet's own thread pools would only contend.
ENV = {"OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"}


def _env(env):
    merged = dict(ENV)
    merged.update(env or {})
    return merged


def run_program(size, target, timeout=120, env=None, **kwargs):
    """Runs rank_programs.<target> ("module:function") as `size` ranks; returns a RankResult per rank."""
    return testing.run_program(size, "rank_programs." + target, path=HERE, timeout=timeout, env=_env(env), **kwargs)


def run_program_ok(size, target, timeout=120, env=None, **kwargs):
    """Like run_program(), but every rank must exit 0; returns what each rank reported."""
    return testing.run_program_ok(size, "rank_programs." + target, path=HERE, timeout=timeout, env=_env(env),
                                  **kwargs)
