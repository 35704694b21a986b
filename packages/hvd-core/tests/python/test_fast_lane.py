# test_fast_lane.py - the same-host fast lane (docs/core.md, "The fast lane"):
# a small synchronous allreduce (broadcast, allgather, reducescatter)
# negotiated once runs through the shared-memory arena without the
# coordinator, with the bits negotiation gives; whatever the members cannot
# agree on in the lane (other tensors, late ranks, a join, another shape) is
# negotiated as before. Rank side: rank_programs/fast_lane.py.
import pytest

import ranks

OFF = {"HVD_SHM_LANE": "0"}


@pytest.mark.parametrize("np_", [2, 3])
def test_lane_gives_the_bits_of_negotiation_for_every_dtype_op_and_scale(np_):
    results = ranks.run_program_ok(np_, "fast_lane:lane_gives_the_bits_of_negotiation", timeout=240)
    for rank, res in enumerate(results):
        assert res["failures"] == [], "rank %d: lane and negotiation differ: %s" % (rank, res["failures"][:10])
        assert 0 < res["lane_calls"] <= res["expected_at_most"], (rank, res)
    # A call runs in the lane on every rank or on none.
    assert len({res["lane_calls"] for res in results}) == 1, results


@pytest.mark.parametrize("np_", [2, 3])
def test_small_broadcasts_run_in_the_lane_from_every_root_with_the_roots_values(np_):
    results = ranks.run_program_ok(np_, "fast_lane:broadcasts_in_the_lane", timeout=240)
    for rank, res in enumerate(results):
        assert res["failures"] == [], "rank %d: wrong broadcast results: %s" % (rank, res["failures"][:10])
        assert res["lane_calls"] > 0, (rank, res)
    assert len({res["lane_calls"] for res in results}) == 1, results


@pytest.mark.parametrize("np_", [2, 3])
def test_small_allgathers_run_in_the_lane_with_every_ranks_values(np_):
    results = ranks.run_program_ok(np_, "fast_lane:allgathers_in_the_lane", timeout=240)
    for rank, res in enumerate(results):
        assert res["failures"] == [], "rank %d: wrong allgather results: %s" % (rank, res["failures"][:10])
        assert res["lane_calls"] > 0, (rank, res)
    assert len({res["lane_calls"] for res in results}) == 1, results


@pytest.mark.parametrize("np_", [2, 3])
def test_small_reducescatters_in_the_lane_give_the_bits_of_negotiation(np_):
    results = ranks.run_program_ok(np_, "fast_lane:reducescatters_in_the_lane", timeout=240)
    for rank, res in enumerate(results):
        assert res["failures"] == [], "rank %d: lane and negotiation differ: %s" % (rank, res["failures"][:10])
        assert res["lane_calls"] > 0, (rank, res)
    assert len({res["lane_calls"] for res in results}) == 1, results


@pytest.mark.parametrize("np_, route", [(2, None), (3, None), (3, "read")])
def test_large_broadcasts_and_allgathers_stream_through_the_lane_exactly(np_, route):
    # Three ranks on the two CPUs of CI machines: the ranks yield instead of
    # spinning. route "read": every large lane broadcast and allgather is
    # read out of the writers' processes instead of streamed (by default the
    # root, for an allgather rank 0, picks by time).
    env = {"HVD_SHM_LANE_BROADCAST": route} if route else None
    results = ranks.run_program_ok(np_, "fast_lane:streamed_broadcasts_and_allgathers", timeout=300, env=env)
    for rank, res in enumerate(results):
        assert res["failures"] == [], "rank %d: wrong results: %s" % (rank, res["failures"][:10])
        counts = res["lane_calls"]
        above = counts.pop("float32.%d" % ((1 << 19) + 1))
        assert above == 0, "rank %d: a broadcast above the streaming limit ran in the lane" % rank
        # A size's first call of each name is negotiated; later ones stream
        # unless a rank is late by more than the lane's 2 ms wait (the rank
        # program then runs more rounds, up to 40, until one streamed). Three
        # ranks sharing two loaded CPUs can miss it at every round of a size,
        # so there at least one size.
        if np_ == 2:
            assert all(c > 0 for c in counts.values()), (rank, counts)
        else:
            assert sum(counts.values()) > 0, (rank, counts)
    assert len({str(res["lane_calls"]) for res in results}) == 1, results


def test_allgather_rows_that_differ_are_negotiated_and_stay_exact():
    results = ranks.run_program_ok(2, "fast_lane:allgather_rows_change_after_lane_calls", timeout=120)
    for r in results:
        assert r["wrong"] == [], results
        # Every fourth call has unequal shapes and cannot run in the lane.
        assert 0 < r["lane_calls"] <= 30, results
    assert results[0]["lane_calls"] == results[1]["lane_calls"], results


def test_a_broadcast_root_mismatch_after_lane_calls_is_reported_on_every_rank():
    results = ranks.run_program_ok(2, "fast_lane:broadcast_root_mismatch_after_warm_up_is_reported", timeout=60)
    for r in results:
        assert r["warmed"] > 0, results
        assert r["error"] == "HorovodCollectiveMismatchError", results
        assert "root" in r["message"], r["message"]


def test_a_tight_loop_runs_in_the_lane_and_is_exact():
    results = ranks.run_program_ok(2, "fast_lane:tight_loop", timeout=120)
    assert [r["wrong"] for r in results] == [0, 0]
    # Every call after the first may run in the lane; how many do depends on
    # the machine (a rank that loses its CPU for 2 ms sends that call to
    # negotiation). A call runs in the lane on every rank or on none.
    assert results[0]["lane_calls"] > 0, results
    assert results[0]["lane_calls"] == results[1]["lane_calls"], "a call ran in the lane on one rank only"


@pytest.mark.parametrize("env", [OFF, {"HOROVOD_CACHE_CAPACITY": "0"}, {"HOROVOD_SHM_DISABLE": "1"},
                                 {"HOROVOD_TIMELINE": "timeline.json"}],
                         ids=["switched_off", "no_response_cache", "no_shared_memory", "timeline"])
def test_the_lane_stays_unused_where_it_must(env, tmp_path):
    # The timeline records what the coordinator negotiates; without a response
    # cache every call is negotiated (Horovod's meaning of capacity 0).
    results = ranks.run_program_ok(2, "fast_lane:tight_loop", kwargs={"calls": 200}, timeout=120, env=env,
                                   cwd=str(tmp_path))
    assert results == [{"wrong": 0, "lane_calls": 0}] * 2


def test_ranks_out_of_step_fall_back_to_negotiation_and_stay_exact():
    results = ranks.run_program_ok(2, "fast_lane:out_of_step_ranks_fall_back", timeout=120)
    for r in results:
        assert r["wrong"] == 0, results
        # Every third call waits for a sleeping rank 1 and is negotiated.
        assert r["lane_calls"] <= 40, results
    assert results[0]["lane_calls"] > 0 and results[0]["lane_calls"] == results[1]["lane_calls"], results


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter"])
def test_a_shape_mismatch_after_lane_calls_is_reported_on_every_rank(collective):
    results = ranks.run_program_ok(2, "fast_lane:mismatch_after_warm_up_is_reported",
                                   kwargs={"collective": collective}, timeout=60)
    for r in results:
        assert r["warmed"] > 0, results
        assert r["error"] == "HorovodCollectiveMismatchError", results
        assert "shape" in r["message"] and "x'" in r["message"], r["message"]


def test_a_join_keeps_the_lane_counts_of_both_ranks_equal():
    results = ranks.run_program_ok(2, "fast_lane:join_keeps_the_ranks_in_step", timeout=120)
    for r in results:
        assert r["wrong"] == [], results
        assert r["during_join"] == 0, results
    # The counts the lane matches calls by stayed equal: calls run in the lane
    # again after the join, on both ranks alike.
    assert results[0]["after"] > 0 and results[0]["after"] == results[1]["after"], results
    assert results[0]["last_joined"] == results[1]["last_joined"] == 1


def test_threads_of_a_rank_share_its_lane():
    results = ranks.run_program_ok(2, "fast_lane:threads_share_the_lane", timeout=120)
    assert [r["wrong"] for r in results] == [[], []]


def test_a_process_set_has_its_own_lane():
    results = ranks.run_program_ok(3, "fast_lane:process_set_lane", timeout=120,
                                   env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"})
    assert [r["wrong"] for r in results] == [0, 0, 0]
    assert results[0]["set_lane_calls"] > 0 and results[0]["set_lane_calls"] == results[2]["set_lane_calls"], results
    assert results[1]["set_lane_calls"] == 0
    assert [r["global_lane_calls"] for r in results] == [0, 0, 0]
