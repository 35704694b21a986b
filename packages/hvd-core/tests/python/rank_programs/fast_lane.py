# fast_lane.py - rank side of test_fast_lane.py: small synchronous allreduces
# that were negotiated once run in the same-host fast lane; these programs
# check that they give the bits negotiation gives, that the lane is really
# taken (hvd_process_set_info.fast_lane_calls), and that anything the lane
# cannot agree on goes back to negotiation with nothing lost.
"""Rank programs for test_fast_lane.py."""

import time

import numpy as np

import horovod.common as hvd
from rank_programs.collectives import DTYPES, dt, make


def lane_calls(process_set=hvd.global_process_set):
    return int(process_set._info().fast_lane_calls)


def _case_input(rank, shape, dtype_name, call):
    """Rank `rank`'s input for the `call`-th call of a case: new values every
    call; floats with full mantissas, so a sum of three rounds differently in
    another order."""
    if dtype_name in ("float16", "bfloat16", "float32", "float64"):
        rng = np.random.default_rng(1000 * rank + call)
        return rng.standard_normal(shape).astype(dt(dtype_name))
    return make(rank + call, shape, dtype_name)


def lane_gives_the_bits_of_negotiation(rounds=3):
    """Every dtype x op x scale factors, in place and not: the same inputs
    through a tensor name negotiated every time (a fresh name) and through
    one that runs in the lane must give identical bytes. Returns the failing
    cases and the number of lane calls made."""
    hvd.init()
    rank = hvd.rank()
    failures = []
    expected_lane = 0
    before = lane_calls()
    for dtype_name, shape, op, pre, post, case in _reduction_cases([(1,), (7, 3), (256,), (4000,)]):
        for call in range(rounds):
            x = _case_input(rank, shape, dtype_name, call)
            fresh = hvd.allreduce(x, op=op, name="fresh.%s.%d" % (case, call),
                                  prescale_factor=pre, postscale_factor=post)
            lane = hvd.allreduce(x, op=op, name="lane." + case, prescale_factor=pre, postscale_factor=post)
            inplace = x.copy()
            hvd.allreduce_(inplace, op=op, name="lane_.%s" % case, prescale_factor=pre, postscale_factor=post)
            if call > 0:
                expected_lane += 2
            for label, got in (("out_of_place", lane), ("in_place", inplace)):
                if got.dtype != fresh.dtype or got.tobytes() != fresh.tobytes():
                    failures.append([case, call, label])
    return {"failures": failures, "lane_calls": lane_calls() - before, "expected_at_most": expected_lane}


def _reduction_cases(shapes):
    """(dtype name, shape, op, prescale, postscale, case label) for every
    dtype, shape, op and pair of scale factors (floats only) a reduction
    lane test covers."""
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product, "Average": hvd.Average}
    for dtype_name in DTYPES:
        for shape in shapes:
            for opname, op in ops.items():
                if dtype_name == "bool" and opname == "Average":
                    continue
                scales = [(1.0, 1.0)]
                if dtype_name.startswith("float") or dtype_name == "bfloat16":
                    scales.append((0.5, 3.0))
                for pre, post in scales:
                    yield dtype_name, shape, op, pre, post, "%s.%s.%s.%s.%s" % (dtype_name, opname, shape, pre, post)


def tight_loop(calls=2000, name="loop", check_every=1):
    """A tight loop of 4-byte allreduces: returns how many ran in the lane."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    before = lane_calls()
    a = np.zeros(1, np.float32)
    wrong = 0
    for i in range(calls):
        a[0] = rank + i
        hvd.allreduce_(a, op=hvd.Sum, name=name)
        if a[0] != sum(r + i for r in range(size)):
            wrong += 1
    return {"wrong": wrong, "lane_calls": lane_calls() - before}


def out_of_step_ranks_fall_back(calls=60):
    """Rank 1 sleeps 100 ms (fifty times the lane's wait) before every third
    call: those calls are negotiated, the others still run in the lane, and
    every result is right."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    before = lane_calls()
    a = np.zeros(3, np.float64)
    wrong = 0
    for i in range(calls):
        if rank == 1 and i % 3 == 0:
            time.sleep(0.1)
        a[:] = rank * 10 + i
        hvd.allreduce_(a, op=hvd.Sum, name="step")
        if not np.all(a == sum(r * 10 + i for r in range(size))):
            wrong += 1
    return {"wrong": wrong, "lane_calls": lane_calls() - before}


def mismatch_after_warm_up_is_reported(collective="allreduce"):
    """After "x" ran in the lane, rank 1 submits it with another shape (for
    allgather, other trailing dimensions; its rows may differ): both ranks
    get the usual mismatch error, not a hang and not a wrong result."""
    hvd.init()
    rank = hvd.rank()
    call = getattr(hvd, collective)
    shape, other = ((4, 2), (4, 3)) if collective == "allgather" else ((4,), (5,))
    kwargs = {} if collective == "allgather" else {"op": hvd.Sum}
    # Until a call ran in the lane (at least 5): a loaded machine can make
    # every one of a few miss the lane's 2 ms wait. Every rank counts the same
    # lane calls, so all stop together.
    for i in range(100):
        if i >= 5 and lane_calls() > 0:
            break
        call(np.ones(shape, np.float32), name="x", **kwargs)
    warmed = lane_calls()
    try:
        call(np.ones(other if rank == 1 else shape, np.float32), name="x", **kwargs)
        return {"error": None, "warmed": warmed}
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"error": type(e).__name__, "message": str(e), "warmed": warmed}


def join_keeps_the_ranks_in_step(calls=30):
    """Rank 0 joins early while rank 1 goes on with allreduces of a tensor
    that ran in the lane (rank 0 contributes zeros); after the join both run
    it in the lane again, so the counts the lane matches calls by stayed
    equal on both ranks."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    a = np.zeros(2, np.float32)
    wrong = []
    for i in range(5):
        a[:] = rank + 1
        hvd.allreduce_(a, op=hvd.Sum, name="j")
    before_join = lane_calls()
    if rank == 0:
        last = hvd.join()
    else:
        for i in range(calls):
            a[:] = rank + 1
            hvd.allreduce_(a, op=hvd.Sum, name="j")
            if not np.all(a == rank + 1):
                wrong.append(["joined", i, a.tolist()])
        last = hvd.join()
    during_join = lane_calls() - before_join
    start = lane_calls()
    for i in range(calls):
        a[:] = rank + 1
        hvd.allreduce_(a, op=hvd.Sum, name="j")
        if not np.all(a == sum(r + 1 for r in range(size))):
            wrong.append(["after", i, a.tolist()])
    return {"wrong": wrong, "last_joined": last, "during_join": during_join, "after": lane_calls() - start}


def threads_share_the_lane(calls=300):
    """Two threads per rank run synchronous allreduces of their own tensors
    at once: one lane per rank, so one of them at a time is in it and the
    other negotiates; every result is right."""
    import threading
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    wrong = []

    def work(t):
        a = np.zeros(1, np.int64)
        for i in range(calls):
            a[0] = rank + 100 * t + i
            hvd.allreduce_(a, op=hvd.Sum, name="thread.%d" % t)
            if a[0] != sum(r + 100 * t + i for r in range(size)):
                wrong.append([t, i, int(a[0])])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"wrong": wrong, "lane_calls": lane_calls()}


def process_set_lane(calls=200):
    """A process set of ranks 0 and 2 of 3 runs its own lane; rank 1 is not in it."""
    hvd.init()
    rank = hvd.rank()
    ps = hvd.add_process_set([0, 2])
    out = {"wrong": 0, "set_lane_calls": 0}
    if rank in (0, 2):
        a = np.zeros(1, np.int32)
        for i in range(calls):
            a[0] = rank + i
            hvd.allreduce_(a, op=hvd.Sum, name="ps", process_set=ps)
            out["wrong"] += int(a[0] != (0 + i) + (2 + i))
        out["set_lane_calls"] = lane_calls(ps)
    out["global_lane_calls"] = lane_calls()
    hvd.barrier()
    return out


def broadcasts_in_the_lane(rounds=3):
    """Small broadcasts from every root, every dtype, in place and not: each
    name is negotiated once and may then run in the lane; every call must
    leave the root's values of that call on every rank, and the root's own
    input untouched by the out-of-place call. Returns the failing cases and
    the lane calls made."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    before = lane_calls()
    for dtype_name in DTYPES:
        for shape in [(1,), (7, 3), (4000,)]:
            for root in range(size):
                case = "%s.%s.%d" % (dtype_name, shape, root)
                for call in range(rounds):
                    want = _case_input(root, shape, dtype_name, call)
                    mine = _case_input(rank, shape, dtype_name, call)
                    kept = mine.copy()
                    got = hvd.broadcast(mine, root, name="b." + case)
                    if got.tobytes() != want.tobytes() or mine.tobytes() != kept.tobytes():
                        failures.append([case, call, "out_of_place"])
                    hvd.broadcast_(mine, root, name="b_." + case)
                    if mine.tobytes() != want.tobytes():
                        failures.append([case, call, "in_place"])
    return {"failures": failures, "lane_calls": lane_calls() - before}


# Above the lane's 32 KiB payload a broadcast or allgather piece streams
# through the lane's ring (1 MiB, in chunks of up to 64 KiB) up to 2 MiB:
# sizes that end inside a chunk, one that wraps the ring within a call, the
# limit itself, and one element more (negotiated every time).
STREAMED = [("float32", 8459), ("uint8", 200001), ("float64", 170001), ("float32", 1 << 19)]
ABOVE_STREAMING = ("float32", (1 << 19) + 1)


def streamed_broadcasts_and_allgathers(rounds=4, most_rounds=40):
    """Every size above from every root, in place and not, then as an
    allgather, each followed by a negotiated allreduce (through the slots the
    ring sits beside) and a small lane allreduce: every call must give that
    call's values of the root (of every rank, in rank order) and leave the
    inputs as they were. A streamed size whose `rounds` all missed the lane
    (a rank late by more than its 2 ms wait, on a loaded machine) gets more
    rounds, up to `most_rounds`; every rank counts the same lane calls, so
    all stop together. Returns the failures and, per size, how many of its
    broadcasts and allgathers ran in the lane."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures, lane_calls_by_size = [], {}
    between = np.ones(300000, np.float32)
    small = np.ones(16, np.float32)

    def check(ok, *what):
        if not ok:
            failures.append(list(what))

    def counted(run):
        before = lane_calls()
        result = run()
        lane_calls_by_size[case] += lane_calls() - before
        return result

    for dtype_name, n in STREAMED + [ABOVE_STREAMING]:
        case = "%s.%d" % (dtype_name, n)
        lane_calls_by_size[case] = 0
        streamed = (dtype_name, n) != ABOVE_STREAMING
        call = 0
        while call < rounds or (streamed and lane_calls_by_size[case] == 0 and call < most_rounds):
            for root in range(size):
                want = _case_input(root, (n,), dtype_name, call)
                mine = _case_input(rank, (n,), dtype_name, call)
                kept = mine.copy()
                got = counted(lambda: hvd.broadcast(mine, root, name="sb.%s.%d" % (case, root)))
                check(got.tobytes() == want.tobytes() and mine.tobytes() == kept.tobytes(), case, call, root,
                      "broadcast")
                counted(lambda: hvd.broadcast_(mine, root, name="sb_.%s.%d" % (case, root)))
                check(mine.tobytes() == want.tobytes(), case, call, root, "broadcast_")
                check(np.array_equal(hvd.allreduce(between, op=hvd.Sum, name="between"), between * size),
                      case, call, root, "allreduce between")
                hvd.allreduce(small, name="small")
            mine = _case_input(rank, (n,), dtype_name, call)
            want = np.concatenate([_case_input(r, (n,), dtype_name, call) for r in range(size)])
            got = counted(lambda: hvd.allgather(mine, name="sg." + case))
            check(got.tobytes() == want.tobytes(), case, call, "allgather")
            call += 1
    return {"failures": failures, "lane_calls": lane_calls_by_size}


def broadcast_root_mismatch_after_warm_up_is_reported():
    """After "r" ran in the lane from root 0, rank 1 names root 1: both ranks
    get the usual mismatch error, not a hang and not rank 1's values."""
    hvd.init()
    rank = hvd.rank()
    a = np.zeros(4, np.float32)
    for i in range(100):  # until one ran in the lane, as above
        if i >= 5 and lane_calls() > 0:
            break
        a[:] = rank + i
        hvd.broadcast_(a, 0, name="r")
    warmed = lane_calls()
    try:
        hvd.broadcast_(a, 1 if rank == 1 else 0, name="r")
        return {"error": None, "warmed": warmed}
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"error": type(e).__name__, "message": str(e), "warmed": warmed}


def allgathers_in_the_lane(rounds=3):
    """Small allgathers of every dtype with the same shape on every rank: a
    name is negotiated once and may then run in the lane; every call must
    return the ranks' inputs of that call stacked in rank order, as a new
    array (an earlier result keeps its values). Returns the failing cases and
    the lane calls made."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    failures = []
    before = lane_calls()
    for dtype_name in DTYPES:
        for shape in [(1,), (7, 3), (2, 1, 5), (4000,)]:
            case = "%s.%s" % (dtype_name, shape)
            kept = None
            for call in range(rounds):
                mine = _case_input(rank, shape, dtype_name, call)
                want = np.concatenate([_case_input(r, shape, dtype_name, call) for r in range(size)])
                got = hvd.allgather(mine, name="g." + case)
                if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
                    failures.append([case, call, "result"])
                if kept is not None and kept[0].tobytes() != kept[1]:
                    failures.append([case, call, "an earlier result changed"])
                kept = (got, got.tobytes())
                # A read-only input takes the checked path; the same name runs on.
                frozen = mine.copy()
                frozen.flags.writeable = False
                if hvd.allgather(frozen, name="g." + case).tobytes() != want.tobytes():
                    failures.append([case, call, "read-only input"])
    return {"failures": failures, "lane_calls": lane_calls() - before}


def allgather_rows_change_after_lane_calls(calls=40):
    """After "rows" ran in the lane with 2 rows everywhere, rank 1 sends 3
    rows on every fourth call: those calls cannot run in the lane (the shapes
    differ) and are negotiated, with every rank's rows in the result; the
    others still run in the lane."""
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    wrong = []
    before = lane_calls()
    for i in range(calls):
        rows = [3 if (r == 1 and i % 4 == 3) else 2 for r in range(size)]
        mine = np.full((rows[rank], 2), rank * 100 + i, np.int32)
        got = hvd.allgather(mine, name="rows")
        want = np.concatenate([np.full((rows[r], 2), r * 100 + i, np.int32) for r in range(size)])
        if got.shape != want.shape or not np.array_equal(got, want):
            wrong.append([i, got.tolist()])
    return {"wrong": wrong, "lane_calls": lane_calls() - before}


def reducescatters_in_the_lane(rounds=3):
    """Small reducescatters of every dtype, op and scale, with row counts
    that split evenly and unevenly (and leave some ranks no rows): a name
    negotiated once may then run in the lane and must give the bytes a name
    negotiated every time gives. Returns the failing cases and the lane
    calls made."""
    hvd.init()
    rank = hvd.rank()
    failures = []
    before = lane_calls()
    for dtype_name, shape, op, pre, post, case in _reduction_cases([(1,), (7, 3), (6,), (1000, 4)]):
        for call in range(rounds):
            x = _case_input(rank, shape, dtype_name, call)
            fresh = hvd.reducescatter(x, op=op, name="fresh.%s.%d" % (case, call),
                                      prescale_factor=pre, postscale_factor=post)
            lane = hvd.reducescatter(x, op=op, name="lane." + case, prescale_factor=pre, postscale_factor=post)
            if lane.dtype != fresh.dtype or lane.shape != fresh.shape or lane.tobytes() != fresh.tobytes():
                failures.append([case, call])
    return {"failures": failures, "lane_calls": lane_calls() - before}
