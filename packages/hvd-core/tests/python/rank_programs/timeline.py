# timeline.py - rank side of test_timeline.py: collectives run while a
# timeline is written, from the environment or started at run time.
"""Rank programs for test_timeline.py."""

import json
import os
import time

import numpy as np

import horovod.common as hvd
from horovod.common import testing


def five_steps_reading_the_timeline_each_step():
    hvd.init()
    snapshots = []
    for step in range(5):
        hvd.allreduce(np.ones(100, np.float32), name="grad.%d" % (step % 2))
        hvd.allgather(np.ones((hvd.rank() + 1, 2), np.float32), name="gathered")
        hvd.broadcast(np.ones(3, np.float32), 0, name="b")
        if hvd.rank() == 0:
            time.sleep(0.15)
            with open(os.environ["HOROVOD_TIMELINE"]) as f:
                json.load(f)  # must parse mid-run
            snapshots.append(True)
    testing.report(snapshots)
    hvd.shutdown()


def start_and_stop_the_timeline_at_run_time(path):
    hvd.init()
    hvd.allreduce(np.ones(4, np.float32), name="before")
    hvd.start_timeline(path, mark_cycles=False)
    hvd.allreduce(np.ones(4, np.float32), name="during")
    hvd.stop_timeline()
    hvd.barrier()  # rank 1 must not submit "after" before rank 0 stopped the timeline
    hvd.allreduce(np.ones(4, np.float32), name="after")
    return True
