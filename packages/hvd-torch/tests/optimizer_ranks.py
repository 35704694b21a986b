# optimizer_ranks.py - runs torch snippets as N real, initialised hvd ranks
# (horovod.common.testing) for the optimizer/functions/convergence/
# SyncBatchNorm tests. Each snippet prints one JSON line last; run_ok()
# returns those, one per rank.
"""Helpers to run torch snippets as N real hvd ranks, after hvd.init()."""

from horovod.common import testing

PREAMBLE = """
import json, os, sys
import torch
import horovod.torch as hvd
torch.set_num_threads(1)
hvd.init()
"""


def run_ok(size, code, timeout=120, env=None):
    env = dict(env or {}, OMP_NUM_THREADS="1")
    return testing.run_ok(size, code, preamble=PREAMBLE, timeout=timeout, env=env)
