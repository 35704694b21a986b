# conftest.py - shared fixtures for hvd-tensorflow's tests: `tf_ranks` runs a
# snippet as N real hvd ranks (horovod.common.testing: real rendezvous, one
# OS process per rank) after `import horovod.tensorflow as hvd; hvd.init()`,
# or a function of a module in rank_programs/ (run_program_ok).
# Starting TensorFlow costs seconds per process, so each test file launches
# few jobs that check many things and return one JSON report per rank.
import os

import pytest

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))

PREAMBLE = r"""
import json, os, sys, traceback
import numpy as np
import tensorflow as tf
# Ranks share two cores: more threads would only contend.
tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)  # one thread inside each op as well
import horovod.tensorflow as hvd
hvd.init()
rank, size = hvd.rank(), hvd.size()
report = {}

def check(name):
    # Decorator: runs the check now and records "ok" or the traceback, so one
    # failing check does not hide the others.
    def run(fn):
        try:
            result = fn()
            report[name] = "ok" if result is None else result
        except Exception:
            report[name] = "FAILED\n" + traceback.format_exc()
        return fn
    return run
"""

RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1", "TF_ENABLE_ONEDNN_OPTS": "0",
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


class _Ranks:
    def run(self, size, code, timeout=180, env=None):
        return testing.run(size, code, preamble=PREAMBLE, timeout=timeout, env=dict(RANK_ENV, **(env or {})))

    def run_ok(self, size, code, timeout=180, env=None):
        return testing.run_ok(size, code, preamble=PREAMBLE, timeout=timeout, env=dict(RANK_ENV, **(env or {})))

    def run_program_ok(self, size, target, kwargs=None, timeout=180, env=None):
        """Runs rank_programs.<target> ("module:function"); every rank must exit 0; returns what each reported."""
        return testing.run_program_ok(size, "rank_programs." + target, path=HERE, kwargs=kwargs, timeout=timeout,
                                      env=dict(RANK_ENV, **(env or {})))


@pytest.fixture(scope="session")
def tf_ranks():
    return _Ranks()


def assert_ok(reports, name):
    """Asserts check `name` passed on every rank (the report holds the traceback otherwise)."""
    for r, report in enumerate(reports):
        assert name in report, "rank %d: check %r did not run; checks run: %s" % (r, name, sorted(report))
        assert report[name] == "ok", "rank %d, %s:\n%s" % (r, name, report[name])
