# test_interrupts.py - a rank waiting on a collective still runs Python signal
# handlers: Ctrl-C (SIGINT) raises KeyboardInterrupt and an alarm handler's
# exception (what pytest-timeout does) propagates, within a fraction of a
# second. The interrupted operation stays in flight with its buffers alive,
# and shutdown() ends it cleanly. What the ranks run is in
# rank_programs/interrupts.py.
import pytest

import ranks

# The synchronous calls wait through the C accelerator (HVD_FASTCALL=1, the
# default where it is built) or through ctypes alone: both must be interruptible.
BOTH_CALL_PATHS = pytest.mark.parametrize("fastcall", ["1", "0"])


@BOTH_CALL_PATHS
def test_ctrl_c_interrupts_a_pending_allreduce_and_the_operation_still_completes(tmp_path, fastcall):
    results = ranks.run_program_ok(2, "interrupts:rank_0_interrupted_in_a_collective",
                                   kwargs={"marker_dir": str(tmp_path)}, timeout=60,
                                   env={"HVD_FASTCALL": fastcall})
    assert results[0]["interrupted"] is True
    assert results[0]["waited"] < 1.0, results[0]
    for res in results:
        assert res["x"] == [1.0, 3.0, 5.0, 7.0]
        assert res["after"] == [2.0]


@BOTH_CALL_PATHS
def test_ctrl_c_interrupts_a_repeated_out_of_place_allreduce_and_its_result_array_is_kept_alive(tmp_path, fastcall):
    # The call was made once before, so its block is cached (with the
    # accelerator: in its C table, which allocates the result array).
    results = ranks.run_program_ok(2, "interrupts:rank_0_interrupted_in_a_collective",
                                   kwargs={"marker_dir": str(tmp_path), "collective": "allreduce", "warm_up": True},
                                   timeout=60, env={"HVD_FASTCALL": fastcall})
    assert results[0]["interrupted"] is True and "reduced" not in results[0]
    assert results[0]["waited"] < 1.0, results[0]
    # Input and output stay referenced until the operation completes.
    assert results[0]["kept"] == [[[4], [4]]], results[0]
    assert results[1]["reduced"] == [1.0, 3.0, 5.0, 7.0]
    for rank, res in enumerate(results):
        assert res["x"] == [rank + 0.0, rank + 1.0, rank + 2.0, rank + 3.0]  # the input is left as it was
        assert res["after"] == [2.0]


@BOTH_CALL_PATHS
@pytest.mark.parametrize("warm_up", [False, True], ids=["first call", "repeated call"])
def test_ctrl_c_interrupts_a_pending_allgather_and_later_collectives_still_work(tmp_path, fastcall, warm_up):
    results = ranks.run_program_ok(2, "interrupts:rank_0_interrupted_in_a_collective",
                                   kwargs={"marker_dir": str(tmp_path), "collective": "allgather",
                                           "warm_up": warm_up}, timeout=60, env={"HVD_FASTCALL": fastcall})
    assert results[0]["interrupted"] is True and "gathered" not in results[0]
    assert results[0]["waited"] < 1.0, results[0]
    assert results[1]["gathered"] == [0.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 4.0]
    for res in results:
        assert res["after"] == [2.0]
        assert res["after_gather"] == [0, 0, 1, 1]


def test_alarm_handler_exception_ends_a_wait_and_shutdown_cleans_up():
    results = ranks.run_program(2, "interrupts:rank_0_alarmed_in_a_wait", timeout=60)
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    lines = results[0].stdout.split("\n")
    waited = float(lines[0].split()[2])
    assert lines[0].startswith("alarm after") and waited < 1.5, results[0]
    assert "shut down" in results[0].stdout and "shut down" in results[1].stdout
