# test_collectives.py - horovod.mxnet's collectives at 2 and 3 real ranks:
# every collective on every NDArray dtype, in place and not, against numpy;
# MXNet's engine ordering around the pushed operations; process sets, join
# and objects.
import functools

import pytest

import mxnet_ranks

ENV = {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}


@pytest.mark.parametrize("size", [2, 3])
def test_every_collective_on_every_dtype_matches_numpy(size):
    reports = mxnet_ranks.run_program_ok(size, "collectives:every_collective_every_dtype", timeout=150)
    for rank, report in enumerate(reports):
        assert report["failures"] == [], "rank %d: %s" % (rank, report["failures"])
        assert report["ran"] > 170, report["ran"]  # every dtype's cases ran, bfloat16 included


@pytest.mark.parametrize("size", [2, 3])
def test_pushed_collectives_follow_mxnet_dependencies(size):
    total = size * (size + 1) / 2
    for rank, report in enumerate(mxnet_ranks.run_program_ok(size, "collectives:engine_order_is_respected",
                                                             timeout=120)):
        assert report["after_writer"] == total + 1  # waited for the slow writer, then read by `y + 1`
        assert report["inplace_then_read"] == [2.0 * sum(range(size))] * 3
        assert report["before_writer"] == [total] * 3  # the later `v[:] = 100` did not overtake the send
        assert report["many"] == [float(size * i) for i in range(16)]
        # allgather waits in MXNet's engine: another thread's write to its input waited for it.
        assert report["blocking_gathered"] == [float(r + 1) for r in range(size)]
        if rank != size - 1:
            assert report["blocking_writer"] == {"pending_before_write": 1, "pending_after_write": 0}, report
        assert report["profiled"] == ["HorovodAllgather", "HorovodAllreduce", "HorovodAlltoall",
                                      "HorovodReducescatter"], report["profiled"]


@functools.lru_cache(maxsize=None)
def _process_set_reports(size):
    return mxnet_ranks.run_program_ok(size, "collectives:process_sets_and_join", timeout=120, env=ENV)


@pytest.mark.parametrize("size", [2, 3])
def test_process_set_collectives_involve_only_its_ranks(size):
    evens = [r for r in range(size) if r % 2 == 0]
    for rank, report in enumerate(_process_set_reports(size)):
        if rank % 2:
            assert "set_allreduce" not in report
            continue
        assert report["set_allreduce"] == [float(sum(r + 1 for r in evens))] * 3
        assert report["set_broadcast"] == [0.0, 0.0]
        assert report["set_allgather"] == [float(r) for r in evens]


@pytest.mark.parametrize("size", [2, 3])
def test_join_objects(size):
    for rank, report in enumerate(_process_set_reports(size)):
        assert report["last_joined"] == size - 1
        if rank == size - 1:
            assert report["joined_sum"] == [1.0, 1.0]  # joined ranks stood in with zeros
        assert report["object"] == {"from": size - 1}
        assert report["objects"] == [["rank", r] for r in range(size)]
