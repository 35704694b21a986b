"""horovod.common.testing.horovodrun, the one way every package's tests run the launcher:
it returns the completed run, and a run that outlives its timeout fails with its output."""

import sys

import pytest

from launch_harness import base_env  # (puts the source tree on sys.path when not installed)
from horovod.common import testing


def test_horovodrun_returns_the_completed_launcher_run():
    result = testing.horovodrun("-np", 2, sys.executable, "-c", "import os; print('rank', os.environ['HOROVOD_RANK'])",
                                env=base_env(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(line.split(":", 1)[1] for line in result.stdout.splitlines()) == ["rank 0", "rank 1"], result.stdout


def test_horovodrun_past_its_timeout_fails_with_what_it_printed():
    with pytest.raises(AssertionError) as failure:
        testing.horovodrun("-np", 1, sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)",
                           env=base_env(), timeout=5)
    assert "did not finish within 5 s" in str(failure.value) and "started" in str(failure.value), str(failure.value)
