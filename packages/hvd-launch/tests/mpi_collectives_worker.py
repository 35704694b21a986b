"""A rank of test_mpi_backend.py: every collective over HOROVOD_CPU_OPERATIONS=mpi,
checked against a numpy reference computed from all ranks' deterministic inputs.

    python mpi_collectives_worker.py

Reports one JSON line (testing.report: one write(2), as ranks may share a pipe under a
plain mpirun) naming each check and whether it held; rank 0 adds whether its timeline shows
MPI activity. HVD_TEST_TAG tells concurrent runs' timeline files apart.
"""

import os
import tempfile

import numpy as np

import horovod.common as hvd
from horovod.common import testing


def main():
    timeline = os.path.join(tempfile.gettempdir(),
                            "hvd-mpi-timeline-%d-%s.json" % (os.getpid(), os.environ.get("HVD_TEST_TAG", "")))
    os.environ["HOROVOD_TIMELINE"] = timeline
    hvd.init(process_sets="dynamic")
    rank, size = hvd.rank(), hvd.size()
    out = {"rank": rank, "mpi_enabled": hvd.mpi_enabled() and hvd.mpi_threads_supported()}
    try:
        import ml_dtypes
        BF16 = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        BF16 = None

    def make(r, n, dtype):
        base = (np.arange(n) * 7 + r * 3) % 11
        if dtype == np.bool_:
            return (base + r) % 3 == 0
        if dtype.kind == "f" or dtype == BF16:
            return ((base - 5) * 0.25).astype(dtype)
        if dtype.kind == "u":
            return (base % 4).astype(dtype)
        return ((base % 5) - 2).astype(dtype)

    # allreduce: every dtype x op (fused and alone), against float64 / logical references
    bad = []
    dtypes = [np.dtype(n) for n in ("uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32",
                                    "float64", "bool")] + ([BF16] if BF16 is not None else [])
    for dtype in dtypes:
        for n in (1, 1000):
            inputs = [make(r, n, dtype) for r in range(size)]
            for opname, op in (("sum", hvd.Sum), ("min", hvd.Min), ("max", hvd.Max), ("prod", hvd.Product),
                               ("avg", hvd.Average)):
                if dtype == np.bool_:
                    if opname == "avg":
                        continue
                    ref = (np.logical_or if opname in ("sum", "max") else np.logical_and).reduce(inputs)
                else:
                    wide = np.array([x.astype(np.float64) for x in inputs])
                    ref = {"sum": wide.sum(0), "min": wide.min(0), "max": wide.max(0), "prod": wide.prod(0),
                           "avg": wide.sum(0) / size}[opname]
                    if opname == "avg" and dtype.kind in "iu":
                        ref = np.trunc(ref)
                got = hvd.allreduce(inputs[rank], op=op, name="ar.%s.%s.%d" % (dtype, opname, n))
                tol = 1e-2 if dtype.itemsize == 2 and dtype.kind not in "iu" else 1e-6
                if got.dtype != dtype or not np.allclose(got.astype(np.float64), np.asarray(ref, np.float64),
                                                         rtol=tol, atol=tol):
                    bad.append("%s/%s/%d" % (dtype, opname, n))
    out["allreduce_bad"] = bad

    grouped = hvd.grouped_allreduce([np.full(5, rank + 1.0, np.float32), np.full(3, 2.0 * rank)], op=hvd.Sum)
    total = size * (size + 1) / 2
    out["grouped"] = grouped[0].tolist() == [total] * 5 and grouped[1].tolist() == [float(size * (size - 1))] * 3

    # allgather with a different first dimension per rank
    gathered = hvd.allgather(np.full((rank + 1, 2), rank, np.int64))
    out["allgather"] = gathered.tolist() == [[r, r] for r in range(size) for _ in range(r + 1)]

    # broadcast from every root
    out["broadcast"] = all(hvd.broadcast(np.arange(4.0) + rank, root_rank=root, name="bc%d" % root).tolist()
                           == (np.arange(4.0) + root).tolist() for root in range(size))

    # alltoall with splits: rank r sends j+1 rows of value 10r+j to rank j
    splits = np.arange(1, size + 1)
    send = np.concatenate([np.full(j + 1, 10 * rank + j, np.int32) for j in range(size)])
    received, received_splits = hvd.alltoall(send, splits=splits)
    out["alltoall"] = (received.tolist() == [10 * r + rank for r in range(size) for _ in range(rank + 1)]
                       and received_splits.tolist() == [rank + 1] * size)

    # reducescatter with rows that do not divide evenly
    rows = 2 * size + 1
    mine = hvd.reducescatter(np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * (rank + 1), op=hvd.Sum)
    full = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * total
    start = sum(rows // size + (1 if m < rows % size else 0) for m in range(rank))
    out["reducescatter"] = mine.tolist() == full[start:start + mine.shape[0]].tolist()

    # Adasum over MPI: identical inputs come back unchanged
    out["adasum"] = hvd.allreduce(np.array([1.0, -2.0, 4.0]), op=hvd.Adasum, name="ada").tolist() == [1.0, -2.0, 4.0]

    hvd.barrier()

    # a process set of the even ranks, with its own MPI communicator
    evens = hvd.add_process_set(list(range(0, size, 2)))
    if rank % 2 == 0:
        got = hvd.allreduce(np.array([rank + 1.0]), op=hvd.Sum, process_set=evens)
        out["process_set"] = float(got[0]) == float(sum(r + 1 for r in range(0, size, 2)))
    else:
        out["process_set"] = True
    hvd.remove_process_set(evens)

    # join: the last rank to join is reported, joined ranks add zeros
    if rank == size - 1:
        late = hvd.allreduce(np.array([5.0]), op=hvd.Sum, name="late")
        out["join_zeros"] = float(late[0]) == 5.0
    else:
        out["join_zeros"] = True
    out["join"] = hvd.join() == size - 1

    hvd.shutdown()
    if rank == 0:
        with open(timeline) as f:
            text = f.read()
        out["timeline_mpi"] = "MPI_ALLREDUCE" in text and "MPI_ALLGATHER" in text
        os.unlink(timeline)
    testing.report(out)


if __name__ == "__main__":
    main()
