# test_bad_input.py - input that must be refused with a message saying what is
# wrong (or, for scale factors of 0, honoured) rather than written into
# read-only memory, silently changed, or reported as something else. What the
# ranks run is in rank_programs/bad_input.py.
import pytest

import ranks


def test_results_are_never_written_into_read_only_arrays_and_odd_arrays_are_named():
    for report in ranks.run_program_ok(2, "bad_input:refusals_of_arrays_and_roots"):
        for key in ("allreduce_ into read-only", "broadcast_ into read-only", "grouped_allreduce_ into read-only"):
            assert report[key][0] == "ValueError" and "read-only" in report[key][1], (key, report[key])
        assert report["read-only unchanged"] == [1.0] * 4
        assert report["read-only input is fine"] == [2.0] * 4
        assert report["big-endian"][0] == "ValueError" and "byte order" in report["big-endian"][1]
        assert report["root beyond 32 bits"][0] == "ValueError"
        assert "root_rank 1099511627776" in report["root beyond 32 bits"][1]
        # Names travel in every control message; the engine bounds them.
        assert report["name of 70,000 bytes"][0] == "ValueError"
        assert "longer than the 65536 bytes allowed" in report["name of 70,000 bytes"][1]


def test_scale_factors_of_zero_zero_the_result():
    # Horovod multiplies by the factor as given; 0.0 used to be taken as 1.0.
    for report in ranks.run_program_ok(2, "bad_input:zero_scale_factors"):
        assert report["prescale 0"] == [0.0] * 4
        assert report["postscale 0"] == [0.0] * 4
        assert report["reducescatter postscale 0"] == [[0.0, 0.0]]
        assert report["unscaled"] == [3.0] * 4


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_timeouts_that_are_not_finite_numbers_fail_init_naming_the_variable(value):
    reports = ranks.run_program_ok(2, "bad_input:init_error", env={"HOROVOD_PEER_TIMEOUT_SECONDS": value})
    for report in reports:
        assert report == ["ValueError", "environment variable HOROVOD_PEER_TIMEOUT_SECONDS='%s' is not a finite "
                          "number" % value], report


# HOROVOD_SHM_DISABLE on one rank used to make both fail mid-collective,
# each blaming the other; HOROVOD_AUTOTUNE on one rank would leave the fast
# lane on there only, and a tuned optimizer sharing its bucket size on
# one rank. Init says which setting differs, and where.
@pytest.mark.parametrize("knob", ["HOROVOD_SHM_DISABLE", "HOROVOD_AUTOTUNE"])
def test_settings_that_differ_across_ranks_fail_init_on_every_rank_naming_them(knob):
    reports = ranks.run_program_ok(2, "bad_input:init_error", timeout=60, rank_env_overrides={1: {knob: "1"}})
    for report in reports:
        assert report[0] == "ValueError", report
        assert report[1].startswith(knob + " must be the same on every rank: rank 0 "), report
        assert "has 0, rank 1 (host" in report[1] and report[1].endswith("has 1"), report


def test_a_child_forked_after_init_is_refused_and_the_parents_job_goes_on():
    # The child shares the parent's sockets but not its threads: before, its
    # collective reached the peers as the parent's and broke the job.
    for report in ranks.run_program_ok(2, "bad_input:use_in_a_forked_child", timeout=60):
        child = report["child"]
        for call in ("allreduce", "rank", "init"):
            assert child[call][0] == "ValueError", (call, child[call])
            assert "forked from process" in child[call][1] and "'spawn'" in child[call][1], child[call]
        assert child["is_initialized"] is False
        assert report["child_exit"] == 0
        assert report["parent_allreduce"] == [3.0, 3.0]
