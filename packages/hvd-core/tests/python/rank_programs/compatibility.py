# compatibility.py - rank side of test_compatibility.py: Horovod's
# HOROVOD_TIMELINE=DYNAMIC, a timeline started only when asked.
"""Rank programs for test_compatibility.py."""

import numpy as np

import horovod.common as hvd


def timeline_started_at_run_time(path):
    hvd.init()
    hvd.allreduce(np.ones(2, np.float32), name="before")
    hvd.start_timeline(path)
    hvd.allreduce(np.ones(2, np.float32), name="during")
    hvd.stop_timeline()
    return True
