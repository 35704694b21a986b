# test_testing.py - horovod.common.testing, the launcher every package's tests
# use: a rank program's result comes back per rank, and a failing rank's
# traceback names the file and line that failed. (Its horovodrun() helper
# needs hvd-launch: hvd-launch's test_testing_horovodrun.py checks it.)
import os

import pytest

import ranks

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_programs", "launcher_checks.py")


def test_each_rank_reports_what_its_program_returns_with_the_arguments_given():
    results = ranks.run_program_ok(3, "launcher_checks:returns_its_arguments", kwargs={"step": 7, "tag": "x"})
    assert results == [{"rank": r, "kwargs": {"step": 7, "tag": "x"}} for r in range(3)]


def test_report_is_the_last_line_and_earlier_output_is_ignored():
    assert ranks.run_program_ok(1, "launcher_checks:reports_then_returns_nothing") == [{"reported": True}]


def test_a_failing_rank_fails_run_ok_with_its_traceback_naming_file_and_line():
    with open(CHECKS) as f:
        line = 1 + [i for i, text in enumerate(f) if "fails here on purpose" in text][0]
    with pytest.raises(AssertionError) as failure:
        ranks.run_program_ok(2, "launcher_checks:fails_on_rank_1")
    message = str(failure.value)
    assert message.startswith("rank 1 exited 1"), message
    assert 'rank_programs/launcher_checks.py", line %d, in fails_on_rank_1' % line in message, message
    assert "ValueError: rank 1 fails here on purpose" in message, message

