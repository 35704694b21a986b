# topology.py - rank side of test_topology.py: the same collectives over
# shared memory, TCP and hierarchical transports, and interface selection.
"""Rank programs for test_topology.py."""

import numpy as np

import horovod.common as hvd


def every_collective_small_to_large():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {"topology": [hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()]}
    ok = {}
    for n in [1, 5, 1000, 100003, 2 * 1024 * 1024 + 3]:
        for dtype in [np.float32, np.int64, np.float16]:
            x = ((np.arange(n) % 7) + rank).astype(dtype)
            ref = sum(((np.arange(n) % 7) + r).astype(np.float64) for r in range(size))
            res = hvd.allreduce(x, op=hvd.Sum, name="ar.%d.%s" % (n, np.dtype(dtype).name))
            tol = 1e-2 if dtype == np.float16 else 1e-6
            ok["allreduce.%d.%s" % (n, np.dtype(dtype).name)] = bool(np.allclose(res.astype(np.float64), ref, rtol=tol))
        mx = hvd.allreduce(np.full(n, rank, np.float32), op=hvd.Max, name="max.%d" % n)
        ok["max.%d" % n] = bool(np.all(mx == size - 1))
    g = hvd.allgather(np.full((rank + 1, 3), rank, np.int32))
    ok["allgather"] = g[:, 0].tolist() == [r for r in range(size) for _ in range(r + 1)]
    big = np.full(300000, rank, np.float64)
    ok["allgather_big"] = bool(np.all(hvd.allgather(big).reshape(size, -1)[:, 0] == np.arange(size)))
    for root in range(size):
        b = hvd.broadcast(np.full(70000, rank, np.float32), root, name="bc.%d" % root)
        ok["bcast.%d" % root] = bool(np.all(b == root))
    a, rs = hvd.alltoall(np.repeat(np.arange(size, dtype=np.int32), 2 + rank), splits=[2 + rank] * size)
    ok["alltoall"] = (a.tolist() == [rank] * sum(2 + s for s in range(size))
                      and rs.tolist() == [2 + s for s in range(size)])
    r = hvd.reducescatter(np.ones((size * 3 + 1, 4), np.float32), op=hvd.Sum)
    ok["reducescatter"] = bool(np.all(r == size)) and r.shape[0] == 3 + (1 if rank == 0 else 0)
    hvd.barrier()
    out["ok"] = ok
    return out


def allreduce_over_the_first_interface_in_the_list():
    hvd.init()
    return hvd.allreduce(np.ones(2), op=hvd.Sum).tolist()


def init_with_no_usable_interface():
    try:
        hvd.init()
        return "initialized"
    except ValueError as e:
        return str(e)


def allreduce_on_cpus(cpus=None):
    # Affinity set before init: the engine reads it to decide whether waits busy-poll.
    if cpus is not None:
        import os
        os.sched_setaffinity(0, cpus)
    try:
        hvd.init()
    except ValueError as e:
        return {"error": str(e)}
    return {"sum": hvd.allreduce(np.ones(3), op=hvd.Sum).tolist()}
