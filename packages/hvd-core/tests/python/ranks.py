# ranks.py - runs N real hvd ranks (horovod.common.testing) for hvd-core's
# tests: a function of a module in rank_programs/ (run_program*), or, for the
# few tests about start-up itself, a short snippet with
# `import horovod.common as hvd` in front (run, run_ok).
"""Helpers to run rank programs (or a snippet) as N real hvd ranks."""

import os

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))

PREAMBLE = """
import json, os, sys, time
import numpy as np
import horovod.common as hvd
"""


def run_program(size, target, timeout=60, **kwargs):
    """Runs rank_programs.<target> ("module:function") as `size` ranks; returns a RankResult per rank."""
    return testing.run_program(size, "rank_programs." + target, path=HERE, timeout=timeout, **kwargs)


def run_program_ok(size, target, timeout=60, **kwargs):
    """Like run_program(), but every rank must exit 0; returns what each rank reported."""
    return testing.run_program_ok(size, "rank_programs." + target, path=HERE, timeout=timeout, **kwargs)


def single_process_argv(target):
    """The command line that runs rank_programs.<target> in one process outside any job."""
    return testing.program_argv("rank_programs." + target, path=HERE)


def run(size, code, timeout=60, **kwargs):
    return testing.run(size, code, preamble=PREAMBLE, timeout=timeout, **kwargs)


def run_ok(size, code, timeout=60, **kwargs):
    return testing.run_ok(size, code, preamble=PREAMBLE, timeout=timeout, **kwargs)
