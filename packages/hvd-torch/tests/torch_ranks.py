# torch_ranks.py - runs torch snippets as N real hvd ranks
# (horovod.common.testing) with `import horovod.torch as hvd` in front.
"""Helpers to run torch snippets as N real hvd ranks."""

from horovod.common import testing

PREAMBLE = """
import json, os, sys, time
import torch
import horovod.torch as hvd
# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)
"""


def run(size, code, timeout=120, env=None, **kwargs):
    return testing.run(size, code, preamble=PREAMBLE, timeout=timeout, env=env, **kwargs)


def run_ok(size, code, timeout=120, env=None, **kwargs):
    return testing.run_ok(size, code, preamble=PREAMBLE, timeout=timeout, env=env, **kwargs)
