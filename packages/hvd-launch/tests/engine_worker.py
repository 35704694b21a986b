"""A rank that really runs hvd-core's engine, for test_engine_end_to_end.py and
test_failure_propagation.py.

    python engine_worker.py allreduce | killed-mid-job | killed-at-step-20 | frozen-rank-1 |
                            ring-with-rank-2-frozen

allreduce: reports "RANK SIZE LOCAL_RANK LOCAL_SIZE CROSS_RANK CROSS_SIZE SUM" in one
line. killed-mid-job: rank 1 SIGKILLs itself while the others loop on allreduce;
killed-at-step-20: the same at the 20th of a loop of 1 MiB allreduces.
frozen-rank-1: rank 1 SIGSTOPs itself; rank 0 prints the error its next allreduce
raises and exits 0. ring-with-rank-2-frozen: rank 2 SIGSTOPs itself; the others' next
(ring-sized) allreduce raises and they exit 1.
"""

import os
import signal
import sys
import time

import numpy as np

import horovod.common as hvd


def allreduce():
    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum)
    line = " ".join(str(v) for v in (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
                                      hvd.cross_size(), float(total[0])))
    # One write(2) of less than PIPE_BUF bytes: under a plain mpirun (MPICH) all
    # ranks share one stdout pipe, and print()'s separate writes of text and
    # newline can interleave between ranks.
    os.write(1, (line + "\n").encode())
    hvd.shutdown()


def killed_mid_job():
    hvd.init()
    hvd.allreduce(np.ones(4), op=hvd.Sum)
    if hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        hvd.allreduce(np.ones(4), op=hvd.Sum)
        time.sleep(0.01)


def frozen_rank_1():
    hvd.init()
    hvd.allreduce(np.ones(1, np.float32), name="before")
    if hvd.rank() == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen: alive, but silent
    try:
        hvd.allreduce(np.ones(1, np.float32), name="after")
    except hvd.HorovodInternalError as e:
        print("rank 0 saw:", e)
    sys.exit(0)  # rank 0 ends normally: only the frozen rank is left


def ring_with_rank_2_frozen():
    hvd.init()
    hvd.allreduce(np.ones(1 << 16, np.float32), name="before")
    if hvd.rank() == 2:
        os.kill(os.getpid(), signal.SIGSTOP)
    hvd.allreduce(np.ones(1 << 16, np.float32), name="after")  # the others fail here, and exit 1


def killed_at_step_20():
    hvd.init()
    x = np.ones(1 << 18, np.float32)
    for i in range(100000):
        if hvd.rank() == 1 and i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(x, op=hvd.Sum, name="x")


PROGRAMS = {"allreduce": allreduce, "killed-mid-job": killed_mid_job, "killed-at-step-20": killed_at_step_20,
            "frozen-rank-1": frozen_rank_1, "ring-with-rank-2-frozen": ring_with_rank_2_frozen}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]]()
