# torch_ranks.py - runs N real hvd ranks (horovod.common.testing) for
# hvd-torch's tests: a function of a module in rank_programs/.
"""Helpers to run rank programs as N real hvd ranks."""

import os

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))


def run_program(size, target, timeout=120, env=None, **kwargs):
    """Runs rank_programs.<target> ("module:function") as `size` ranks; returns a RankResult per rank.

    `kwargs` are testing.run_program()'s: `kwargs=` for the function, and
    run()'s (hosts, rank_env_overrides, kill_when_done, cwd).
    """
    return testing.run_program(size, "rank_programs." + target, path=HERE, timeout=timeout, env=env, **kwargs)


def run_program_ok(size, target, timeout=120, env=None, **kwargs):
    """Like run_program(), but every rank must exit 0; returns what each rank reported."""
    return testing.run_program_ok(size, "rank_programs." + target, path=HERE, timeout=timeout, env=env, **kwargs)
