# test_knobs.py - Horovod's HOROVOD_* knobs: those hvd honours act
# (HOROVOD_THREAD_AFFINITY, HOROVOD_LOG_HIDE_TIME), those that mean nothing
# here (GPU, oneCCL, autotune, ...) are accepted and named once, by rank 0.
# Start-up checks run `hvd.init()` inline; the affinity check's ranks run
# rank_programs/knobs.py.
import os
import re

import ranks


def test_knobs_without_effect_are_named_once_by_rank_zero():
    results = ranks.run(2, '''
hvd.init()
hvd.allreduce(np.ones(1, np.float32))
''', env={"HOROVOD_TORUS_ALLREDUCE": "1", "HOROVOD_NUM_NCCL_STREAMS": "2", "HOROVOD_CONTROLLER": "mpi",
          "HOROVOD_AUTOTUNE": "0", "HOROVOD_HIERARCHICAL_ALLGATHER": "false", "HOROVOD_GPU_OPERATIONS": "NCCL"},
       timeout=60)
    assert all(r.returncode == 0 for r in results), results
    notices = [line for line in results[0].stderr.splitlines() if "has no effect" in line]
    assert len(notices) == 3, results[0].stderr
    assert any("HOROVOD_TORUS_ALLREDUCE=1 has no effect: NCCL picks its own" in n for n in notices)
    assert any("HOROVOD_NUM_NCCL_STREAMS=2 has no effect: hvd queues" in n for n in notices)
    assert any("HOROVOD_CONTROLLER=mpi has no effect" in n and "HOROVOD_CPU_OPERATIONS=mpi" in n for n in notices)
    assert "has no effect" not in results[1].stderr  # said once per job, not per rank


def test_thread_affinity_pins_each_local_ranks_background_threads():
    cores = sorted(os.sched_getaffinity(0))
    spec = "%d,%d" % (cores[-1], cores[0])  # rank 0 on the last core, rank 1 on the first
    results = ranks.run_program_ok(2, "knobs:threads_cpus_allowed", env={"HOROVOD_THREAD_AFFINITY": spec},
                                   timeout=60)
    for rank, res in enumerate(results):
        want = str(cores[-1] if rank == 0 else cores[0])
        assert want in res["threads"], res  # the background thread of the global set
        assert res["main"] == cores, res  # the caller's own thread is left alone


def test_bad_thread_affinity_is_a_clear_error():
    for spec, message in (("0,x", "'x' is not a core number"), ("0", "names 1 core(s), but this host runs 2 ranks")):
        results = ranks.run(2, "hvd.init()\n", env={"HOROVOD_THREAD_AFFINITY": spec}, timeout=60)
        for res in results:
            assert res.returncode != 0 and message in res.stderr, res


def test_log_hide_time_leaves_the_timestamp_out():
    stamp = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d hvd\] INFO: initialized")
    for hide, expect_stamp in (("1", False), ("0", True)):
        result = ranks.run(1, "hvd.init()\n", env={"HOROVOD_LOG_LEVEL": "info", "HOROVOD_LOG_HIDE_TIME": hide})[0]
        lines = [line for line in result.stderr.splitlines() if "INFO: initialized" in line]
        assert result.returncode == 0 and lines, result
        assert bool(stamp.match(lines[0])) == expect_stamp, lines[0]
        if not expect_stamp:
            assert lines[0].startswith("[hvd] INFO: initialized"), lines[0]
