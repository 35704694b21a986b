# test_process_sets.py - static and dynamic process sets; collectives on
# disjoint sets run concurrently.
import pytest

import horovod.common as hvd
import ranks


def test_static_process_sets_and_concurrency_on_disjoint_sets():
    results = ranks.run_ok(4, '''
even = hvd.ProcessSet([0, 2])
odd = hvd.ProcessSet([1, 3])
hvd.init(process_sets=[even, odd])
rank = hvd.rank()
mine = even if rank % 2 == 0 else odd
out = {"ids": [even.process_set_id, odd.process_set_id], "size": mine.size(), "rank": mine.rank(),
       "included": [even.included(), odd.included()]}
out["sum"] = hvd.allreduce(np.full(2, rank, np.float32), op=hvd.Sum, process_set=mine).tolist()
out["gather"] = hvd.allgather(np.array([rank], np.int32), process_set=mine).tolist()
# root_rank is a global rank (Horovod's meaning): 2 in the even set, 3 in the odd one.
out["bcast"] = hvd.broadcast(np.array([rank], np.int32), root_rank=mine.ranks[1], process_set=mine).tolist()
# Concurrency: the even set blocks in a collective until the odd set has
# finished one of its own; if sets were serialised this would deadlock.
if rank % 2 == 1:
    hvd.allreduce(np.ones(1, np.float32), name="odd_first", process_set=odd)
    hvd.barrier()  # global: tells the even ranks that odd finished
else:
    h = hvd.allreduce_async(np.ones(1, np.float32), name="even_waits", process_set=even)
    hvd.barrier()
    hvd.synchronize(h)
try:
    hvd.allreduce(np.ones(1, np.float32), process_set=odd if rank % 2 == 0 else even)
    out["nonmember"] = None
except ValueError as e:
    out["nonmember"] = str(e)
print(json.dumps(out))
''')
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
    results = ranks.run_ok(4, '''
even = hvd.ProcessSet([0, 2])
odd = hvd.ProcessSet([1, 3])
hvd.init(process_sets=[even, odd])
rank = hvd.rank()
mine = even if rank % 2 == 0 else odd
root = mine.ranks[1]  # global rank 2 or 3: its position in the set is 1
out = {}
buf = np.array([rank, rank], np.int64)
hvd.broadcast_(buf, root_rank=root, process_set=mine)
out["bcast_"] = buf.tolist()
h = hvd.broadcast_async(np.array([10 * rank], np.int32), root_rank=root, process_set=mine)
out["bcast_async"] = hvd.synchronize(h).tolist()
out["object"] = hvd.broadcast_object({"from": rank}, root_rank=root, process_set=mine)
try:  # global rank 1 is not in the even set, nor 0 in the odd one
    hvd.broadcast(np.ones(1, np.float32), root_rank=1 - rank % 2, process_set=mine)
    out["outside"] = None
except ValueError as e:
    out["outside"] = str(e)
try:  # members disagree about the root: named with global ranks
    hvd.broadcast(np.ones(1, np.float32), root_rank=mine.ranks[rank // 2], process_set=mine, name="split")
    out["mismatch"] = None
except hvd.HorovodCollectiveMismatchError as e:
    out["mismatch"] = str(e)
out["global"] = hvd.broadcast(np.array([rank], np.int32), root_rank=3).tolist()
print(json.dumps(out))
''')
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


def test_dynamic_process_sets_add_use_remove():
    results = ranks.run_ok(3, '''
hvd.init(process_sets="dynamic")
rank = hvd.rank()
out = {}
ps = hvd.add_process_set([0, 2])
out["id"] = ps.process_set_id
if rank in (0, 2):
    out["sum"] = hvd.allreduce(np.full(1, rank, np.float32), op=hvd.Sum, process_set=ps).tolist()
ps2 = hvd.add_process_set(hvd.ProcessSet([1, 2]))
if rank in (1, 2):
    out["sum2"] = hvd.allreduce(np.full(1, rank, np.float32), op=hvd.Sum, process_set=ps2).tolist()
out["removed"] = hvd.remove_process_set(ps)
out["after_remove_id"] = ps.process_set_id
try:
    hvd.allreduce(np.ones(1, np.float32), process_set=ps)
    out["use_removed"] = None
except ValueError as e:
    out["use_removed"] = str(e)
try:
    hvd.add_process_set([0, 1] if rank == 0 else [0, 2])
    out["disagree"] = None
except ValueError as e:
    out["disagree"] = str(e)
out["global"] = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum).tolist()
print(json.dumps(out))
''')
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
    results = ranks.run_ok(2, '''
hvd.init()
try:
    hvd.add_process_set([0])
    print(json.dumps(None))
except ValueError as e:
    print(json.dumps(str(e)))
''')
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
    results = ranks.run_ok(3, '''
def table():
    return {str(k): v for k, v in hvd._basics._get_process_set_ids_and_ranks().items()}
report = {}
for label, sets in (("twice", [hvd.ProcessSet([0]), hvd.ProcessSet([0])]),
                    ("global", [hvd.ProcessSet(range(2, -1, -1))])):
    try:
        hvd.init(process_sets=sets)
        report[label] = None
    except ValueError as e:
        report[label] = [str(e), hvd.is_initialized(), table(), [ps.process_set_id for ps in sets]]
    hvd.shutdown()
for label, sets in (("not distinct", [hvd.ProcessSet([1, 1])]), ("not a rank", [hvd.ProcessSet([5])])):
    try:
        hvd.init(process_sets=sets)
        report[label] = None
    except ValueError as e:
        report[label] = [str(e), hvd.is_initialized()]
ps = hvd.ProcessSet(reversed(range(1, 3)))
hvd.init(process_sets=[hvd.ProcessSet([0]), ps])
report["table"], report["id"] = table(), ps.process_set_id
later = [hvd.ProcessSet([2, 1])]
hvd.init(process_sets=later)
report["later"] = later[0].process_set_id
try:
    hvd.init(process_sets=[hvd.ProcessSet([0, 1])])
    report["unknown"] = None
except ValueError as e:
    report["unknown"] = str(e)
hvd.barrier()  # nobody shuts down while a peer still inits (a departure ends an engine)
print(json.dumps(report))
''', timeout=90)
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
