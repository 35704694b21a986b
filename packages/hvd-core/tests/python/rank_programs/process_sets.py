# process_sets.py - rank side of test_process_sets.py: static and dynamic
# process sets, root ranks on sets, and sets running concurrently.
"""Rank programs for test_process_sets.py."""

import numpy as np

import horovod.common as hvd


def static_sets_on_disjoint_ranks():
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
    return out


def root_rank_is_global_on_process_sets():
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
    return out


def dynamic_add_use_remove():
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
    return out


def add_process_set_without_the_flag():
    hvd.init()
    try:
        hvd.add_process_set([0])
        return "no error"
    except ValueError as e:
        return str(e)


def repeated_and_invalid_static_sets():
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
    return report
