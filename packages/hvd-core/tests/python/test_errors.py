# test_errors.py - bad input and cross-rank mismatches give clear errors on
# every rank, never a hang, and the engine stays usable afterwards. What the
# ranks run is in rank_programs/errors.py.
import json
import subprocess
import sys

import pytest

import ranks

MISMATCH_CASES = ["allgather_tail", "dtype", "op", "prescale", "root", "shape"]  # rank_programs.errors.MISMATCHES


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("case", MISMATCH_CASES)
def test_mismatch_raises_on_every_rank_naming_tensor_and_ranks(case, np_):
    results = ranks.run_program_ok(np_, "errors:mismatch", kwargs={"case": case}, timeout=60)
    expected = {"root": "broadcast.t", "allgather_tail": "allgather.t"}.get(case, "allreduce.t")
    for rank, res in enumerate(results):
        assert res["raised"], "rank %d did not raise" % rank
        assert "'%s'" % expected in res["raised"], res["raised"]
        # Both sides of the disagreement are named.
        assert "rank 0 requested" in res["raised"], res["raised"]
        assert "rank 1 requested" in res["raised"] or "ranks 1, 2 requested" in res["raised"], res["raised"]
        assert res["after"] == [float(np_)] * 2


def test_mismatched_collective_names_both_tensors_never_hangs():
    # Different names on different ranks is a stall, not a mismatch: the stall
    # shutdown turns it into an error on every rank.
    results = ranks.run_program(2, "errors:different_names_on_different_ranks", timeout=30, env={
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "2"})
    for res in results:
        assert "internal:" in res.stdout and "Stall shutdown" in res.stdout, str(res)


def test_ranks_blocked_in_different_collectives_fail_on_every_rank_naming_both():
    # Rank 0 removes a process set while rank 1 waits in a barrier (as when
    # one rank raised and moved on): each waits for something the other will
    # never submit. Both get an error naming both operations, within the peer
    # timeout; hvd.init() brings them together again.
    results = ranks.run_program_ok(2, "errors:blocked_in_different_collectives", timeout=60)
    for res in results:
        assert res["raised"] is not None, res
        assert "diverged" in res["raised"]
        assert "rank 0 waits on allgather 'process_set.remove." in res["raised"], res["raised"]
        assert "rank 1 waits on barrier 'barrier.noname.0'" in res["raised"], res["raised"]
        assert 4.5 < res["after_s"] < 9, res  # HOROVOD_PEER_TIMEOUT_SECONDS (5) after both blocked
        assert res["still_broken"] is True
        assert res["later"] == [2.0]


def test_divergence_is_declared_only_once_every_rank_is_blocked():
    # Ranks 0 and 1 wait on different tensors while rank 2 computes for 8 s:
    # it could still submit either, so nothing fails until it blocks too.
    results = ranks.run_program_ok(3, "errors:divergence_while_rank_2_computes",
                                   env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=60)
    for rank, res in enumerate(results):
        assert "rank 2 waits on allreduce 'allreduce.only_2'" in res["raised"], res
    # Ranks 0 and 1 waited through rank 2's 8 s of work.
    assert results[0]["after_s"] > 8 and results[1]["after_s"] > 8, results


def test_init_replaces_an_engine_that_a_departed_rank_left_unusable():
    # Rank 1 restarts (shutdown, init) while ranks 0 and 2 still hold the old
    # engine: their next collective fails, and their init() joins rank 1's new one.
    results = ranks.run_program_ok(3, "errors:rank_1_restarts_its_engine", timeout=90)
    assert "rank 1 has shut down" in results[0]["void"] and "rank 1 has shut down" in results[2]["void"], results
    assert all(res["again"] == [3.0] for res in results), results


def test_bad_input_raises_an_error_that_names_the_problem():
    out = subprocess.run(ranks.single_process_argv("errors:bad_input_single_process"), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "Horovod has not been initialized; use hvd.init()."
    assert lines[1] == "Horovod has not been initialized; use hvd.init()."
    assert "complex64 is not supported" in lines[2]
    assert "contiguous" in lines[3]
    assert "root_rank 5 is out of range" in lines[4]
    assert "root_rank -1 is out of range" in lines[5]
    assert "splits add up to 3 but the first dimension is 4" in lines[6]
    assert "scalar" in lines[7]
    assert "numpy.ndarray" in lines[8]
    assert "supersedes average" in lines[9]
    assert "bool" in lines[10] and "averaged" in lines[10]
    # Horovod raises a RuntimeError for an unsupported operation; hvd's class is also a TypeError.
    assert lines[11].startswith("HorovodUnsupportedError: reducescatter does not support op=Adasum")
    assert lines[11].endswith("(RuntimeError)")


def test_a_group_naming_a_tensor_twice_is_refused_and_its_names_stay_free():
    for res in ranks.run_program_ok(2, "errors:name_twice_in_one_group"):
        assert "'allreduce.x'" in res["refused"] and "same name" in res["refused"], res
        assert res["after"] == [[1.0] * 4, [3.0] * 4], res


def test_duplicate_in_flight_name_raises_value_error():
    # Rank 1 submits late, so rank 0's first "dup" is certainly still in flight.
    results = ranks.run_program_ok(2, "errors:duplicate_in_flight_name")
    assert "same name" in results[0]["second"] and "'allreduce.dup'" in results[0]["second"]
    for res in results:
        assert res["first"] == [2.0] * 4 and res["reuse"] == [2.0] * 4
        assert "'broadcast.done'" in res["after_poll"] and "not been synchronized" in res["after_poll"], res


def test_init_without_any_job_environment_runs_as_rank_0_of_1():
    out = subprocess.run([sys.executable, "-c", '''
import numpy as np, horovod.common as hvd
hvd.init()
print(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
      hvd.is_homogeneous(), hvd.allreduce(np.ones(2, np.float32)).tolist())
'''], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in __import__("os").environ.items() if not k.startswith("HOROVOD_")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "0", "1", "0", "1", "True", "[1.0,", "1.0]"]


def test_missing_rendezvous_or_secret_is_a_clear_error():
    env = dict(__import__("os").environ, HOROVOD_RANK="0", HOROVOD_SIZE="2")
    out = subprocess.run([sys.executable, "-c", "import horovod.common as hvd; hvd.init()"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0 and "HOROVOD_GLOO_RENDEZVOUS_ADDR" in out.stderr
    env.update(HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1", HOROVOD_GLOO_RENDEZVOUS_PORT="1")
    out = subprocess.run([sys.executable, "-c", "import horovod.common as hvd; hvd.init()"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0 and "HOROVOD_SECRET_KEY" in out.stderr


def test_stall_warning_names_the_tensor_and_the_missing_rank():
    results = ranks.run_program(3, "errors:rank_1_submits_late", env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"},
                                timeout=60)
    for res in results:
        assert res.returncode == 0, str(res)
        assert res.stdout.strip().splitlines()[-1] == "[3.0, 3.0]"
    # The coordinator (rank 0) warns, naming the tensor and who is missing.
    warning = results[0].stderr
    assert "Stall detected" in warning, warning
    assert "'allreduce.late_grad'" in warning and "missing rank(s) 1" in warning, warning


def test_init_comm_must_cover_the_whole_job():
    # Horovod's init(comm=) takes an mpi4py communicator or a list of ranks;
    # hvd runs on the whole job, so only those covering it are accepted.
    results = ranks.run_program(2, "errors:init_with_comm")
    for res in results:
        assert res.returncode == 0, res
        assert all(v is True for v in json.loads(res.stdout.splitlines()[-1]).values()), res.stdout
