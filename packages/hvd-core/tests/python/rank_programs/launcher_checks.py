# launcher_checks.py - rank side of test_testing.py: programs whose outcome
# is known in advance, to check what horovod.common.testing reports.
"""Rank programs for test_testing.py."""

import os

from horovod.common import testing


def returns_its_arguments(**kwargs):
    return {"rank": int(os.environ["HOROVOD_RANK"]), "kwargs": kwargs}


def reports_then_returns_nothing():
    print("a line before the report")
    testing.report({"reported": True})


def fails_on_rank_1():
    if int(os.environ["HOROVOD_RANK"]) == 1:
        raise ValueError("rank 1 fails here on purpose")
    return "fine"
