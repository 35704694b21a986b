# knobs.py - rank side of test_knobs.py: what each rank's threads may run on.
"""Rank programs for test_knobs.py."""

import os

import numpy as np

import horovod.common as hvd


def threads_cpus_allowed():
    """Returns the caller's own CPUs and the Cpus_allowed_list of every other thread."""
    hvd.init()
    hvd.allreduce(np.ones(1, np.float32))
    pinned = set()
    for tid in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/status" % tid) as f:
            allowed = [line.split()[1] for line in f if line.startswith("Cpus_allowed_list")][0]
        if tid != str(os.getpid()):
            pinned.add(allowed)
    # Until every rank has looked: a finished rank 0's goodbye ends the others' background threads.
    hvd.barrier()
    return {"main": sorted(os.sched_getaffinity(0)), "threads": sorted(pinned)}
