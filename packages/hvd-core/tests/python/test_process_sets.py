# test_process_sets.py - static and dynamic process sets; collectives on
# disjoint sets run concurrently. What the ranks run is in
# rank_programs/process_sets.py.
import pytest

import horovod.common as hvd
import ranks


def test_static_process_sets_reduce_among_members_and_disjoint_sets_run_concurrently():
    results = ranks.run_program_ok(4, "process_sets:static_sets_on_disjoint_ranks")
    for rank, res in enumerate(results):
        assert res["ids"] == [1, 2]
        assert res["size"] == 2 and res["rank"] == rank // 2
        assert res["included"] == [rank % 2 == 0, rank % 2 == 1]
        peers = [0, 2] if rank % 2 == 0 else [1, 3]
        assert res["sum"] == [float(sum(peers))] * 2
        assert res["gather"] == peers
        assert res["bcast"] == [peers[1]]
        assert "not a member" in res["nonmember"]


def test_broadcast_root_rank_is_a_global_rank_on_process_sets():
    results = ranks.run_program_ok(4, "process_sets:root_rank_is_global_on_process_sets")
    for rank, res in enumerate(results):
        root = 2 + rank % 2
        assert res["bcast_"] == [root, root]
        assert res["bcast_async"] == [10 * root]
        assert res["object"] == {"from": root}
        members = "0, 2" if rank % 2 == 0 else "1, 3"
        assert "not a member of process set" in res["outside"] and "(ranks %s)" % members in res["outside"]
        lo, hi = (0, 2) if rank % 2 == 0 else (1, 3)
        assert "rank %d requested root_rank %d" % (lo, lo) in res["mismatch"]
        assert "rank %d requested root_rank %d" % (hi, hi) in res["mismatch"]
        assert res["global"] == [3]


def test_dynamic_process_sets_can_be_added_used_and_removed():
    results = ranks.run_program_ok(3, "process_sets:dynamic_add_use_remove")
    for rank, res in enumerate(results):
        assert res["id"] == 1
        if rank in (0, 2):
            assert res["sum"] == [2.0]
        if rank in (1, 2):
            assert res["sum2"] == [3.0]
        assert res["removed"] is True and res["after_remove_id"] is None
        assert "not registered" in res["use_removed"]
        assert "different ranks" in res["disagree"]
        assert res["global"] == [3.0]


def test_dynamic_process_sets_need_the_flag():
    results = ranks.run_program_ok(2, "process_sets:add_process_set_without_the_flag")
    for res in results:
        assert "HOROVOD_DYNAMIC_PROCESS_SETS" in res


def test_process_set_takes_any_iterable_of_ranks():
    # Horovod's own tests pass e.g. reversed(range(...)); order does not matter.
    assert hvd.ProcessSet(reversed(range(1, 4))).ranks == [1, 2, 3]
    assert hvd.ProcessSet(r for r in (2, 0)).ranks == [0, 2]
    assert hvd.ProcessSet({3, 1}).ranks == [1, 3]
    for bad in (5, ["a"], [1.0]):
        with pytest.raises(ValueError):
            hvd.ProcessSet(bad)


def test_repeated_static_process_sets_are_left_unregistered_with_an_error_as_in_horovod():
    # Horovod starts the engine with the distinct sets, then raises ValueError
    # for the repeats; an init while it runs gives sets the registered ids.
    results = ranks.run_program_ok(3, "process_sets:repeated_and_invalid_static_sets", timeout=90)
    for res in results:
        message, running, table, ids = res["twice"]
        assert "entry 1 ([0]) repeats" in message and running, res
        assert table == {"0": [0, 1, 2], "1": [0]} and ids == [1, None], res
        message, running, table, ids = res["global"]
        assert "entry 0 ([0, 1, 2]) repeats" in message and running and table == {"0": [0, 1, 2]}, res
        assert ids == [None], res
        assert "distinct ranks" in res["not distinct"][0] and not res["not distinct"][1], res
        assert "names rank 5" in res["not a rank"][0] and not res["not a rank"][1], res
        assert res["table"] == {"0": [0, 1, 2], "1": [0], "2": [1, 2]} and res["id"] == 2, res
        assert res["later"] == 2 and "entry 0 ([0, 1]) is not registered" in res["unknown"], res
