# ranks.py - runs numpy snippets as N real hvd ranks (horovod.common.testing)
# with `import horovod.common as hvd` in front.
"""Helpers to run a snippet of Python as N real hvd ranks."""

from horovod.common import testing

PREAMBLE = """
import json, os, sys, time
import numpy as np
import horovod.common as hvd
"""


def run(size, code, timeout=60, **kwargs):
    return testing.run(size, code, preamble=PREAMBLE, timeout=timeout, **kwargs)


def run_ok(size, code, timeout=60, **kwargs):
    return testing.run_ok(size, code, preamble=PREAMBLE, timeout=timeout, **kwargs)
