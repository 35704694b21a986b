# conftest.py - shared fixtures for hvd-tensorflow's tests: `tf_ranks` runs a
# function of a module in rank_programs/ as N real hvd ranks
# (horovod.common.testing: real rendezvous, one OS process per rank) in
# RANK_ENV: TensorFlow quiet, on one OpenMP thread, oneDNN's custom ops off.
# Starting TensorFlow costs seconds per process, so each test file launches
# few jobs that check many things and return one JSON report per rank
# (rank_programs/checklist.py records each check's outcome).
import os

import pytest

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))

RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1", "TF_ENABLE_ONEDNN_OPTS": "0",
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


class _Ranks:
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
