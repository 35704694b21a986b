# test_ops.py - the TF op layer (horovod.tensorflow.mpi_ops) at 2 and 3 real
# ranks: every collective in eager mode and inside tf.function, every dtype,
# gradients, process sets, topology ops, and errors on every rank. Each
# launch checks many things: a TF process start costs seconds. The rank
# side is rank_programs/ops.py.
import os
import subprocess
import sys

import pytest

import op_ranks

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _expected(n, r_seen):
    """What every rank must see, computed here from the inputs the rank program builds."""
    import numpy as np
    base = np.arange(6).reshape(2, 3)
    xs = [base + r for r in range(n)]
    exp = {}
    for dt in DTYPES:
        exp["sum." + dt] = sum(xs)
        exp["min." + dt] = np.minimum.reduce(xs)
        exp["max." + dt] = np.maximum.reduce(xs)
        exp["gather." + dt] = np.concatenate([x[:r + 1] for r, x in enumerate(xs)])
        exp["bcast." + dt] = xs[n - 1]
        if dt.startswith("float") or dt == "bfloat16":
            exp["avg." + dt] = sum(xs) / n
            exp["scaled." + dt] = sum(x * 0.5 for x in xs) * 4.0
            exp["prod." + dt] = np.prod(np.stack(xs).astype(np.float64), axis=0)
    for k in ("uint8", "int8", "uint16", "int16"):
        # products of small ints are not checked; sums fit in every type here
        pass
    exp["gather.bool"] = np.concatenate([[r == 0, True, False] for r in range(n)])
    exp["bcast.bool"] = np.array([False, True, False])
    exp["grouped"] = np.concatenate([np.ones(3) * sum(r + 1 for r in range(n)), np.ones(4) * 10.0 * n])
    exp["grouped_gather"] = np.concatenate([np.concatenate([np.full(r + 1, float(r)) for r in range(n)]),
                                            np.concatenate([np.full(2, 7.0 + r) for r in range(n)])])
    rows = np.arange(4 * n, dtype=np.float64).reshape(2 * n, 2)
    total = sum(rows * (r + 1) for r in range(n))
    mine = total[2 * r_seen:2 * r_seen + 2]
    exp["rs_sum"] = mine
    exp["rs_avg"] = mine / n
    exp["grouped_rs"] = np.concatenate([mine.reshape(-1), (mine * 2).reshape(-1)])
    received = np.concatenate([np.full([r_seen + 1, 2], 100 * src + r_seen) for src in range(n)])
    exp["alltoall"] = np.concatenate([received.reshape(-1), [r_seen + 1] * n])
    return exp


@pytest.mark.parametrize("n", [2, 3])
def test_every_collective_and_dtype_eager_and_tf_function(n):
    import numpy as np
    reports = op_ranks.run_program_ok(n, "ops:every_collective_eager_and_tf_function", kwargs={"dtypes": DTYPES},
                                      timeout=240)
    for r, rep in enumerate(reports):
        exp = _expected(n, r)
        for key, want in exp.items():
            eager, graph = rep[key]
            np.testing.assert_allclose(np.asarray(eager, dtype=np.float64), np.asarray(want, dtype=np.float64),
                                       rtol=1e-2 if "16" in key else 1e-6, err_msg="%s on rank %d" % (key, r))
            assert graph == eager, "%s: tf.function %s != eager %s on rank %d" % (key, graph, eager, r)
        assert rep["alltoall_even"] == [[2 * r + 10 * s + k for s in range(n) for k in range(2)], True]
        assert rep["bcast_inplace"] == [[1.0] * 3, [1, 1]]
        assert rep["bcast_inplace_graph"] == [5.0] * 3
        assert rep["bcast_inplace_ref"] == [[1.0] * 2, [11.0], [1.0] * 2]
        assert rep["topology"] == [n, r, n, r, 1]
        assert rep["many"] == [float(n * sum(range(1, 9)))] * 4
        assert 0 <= rep["join"] < n


def test_bfloat16_sum_is_accurate():
    # 0.1 is not exact in bfloat16: a sum accumulated in bfloat16 itself
    # would drift; the engine must round once at the end.
    reports = op_ranks.run_program_ok(2, "ops:bfloat16_sum")
    for dtype, got, want in reports:
        assert dtype == "bfloat16" and got == want


def test_gradients():
    reports = op_ranks.run_program_ok(2, "ops:gradients")
    n = 2
    for r, rep in enumerate(reports):
        assert rep["allreduce_sum"] == [2.0 * (1 + 2)] * 3
        assert rep["allreduce_avg"] == [1.5] * 3
        assert rep["grouped"] == [4.0 * n] * 3
        # upstream on rank s is range(6) * (s + 1); average = range(6) * 1.5; our rows are 3r..3r+2
        assert rep["allgather"] == [1.5 * k for k in range(3 * r, 3 * r + 3)]
        assert rep["broadcast"] == ([1.5] * 3 if r == 1 else [0.0] * 3)
        # rank 0 sent row 0 to itself and rows 1-2 to rank 1; upstream of rank s is (s + 10)
        assert rep["alltoall"] == [10.0, 11.0, 11.0]
        # reducescatter follows Horovod's gradient convention: every input row gets its
        # owner's upstream gradient, times n for Sum (like the allreduce gradient)
        assert rep["reducescatter"] == [1.0, 1.0, 2.0, 2.0]
        assert rep["reducescatter_sum"] == [2.0, 2.0, 4.0, 4.0]
        assert rep["allgather_graph"] == [2.0] * 3


def test_process_sets():
    reports = op_ranks.run_program_ok(3, "ops:process_set_of_even_ranks")
    for r in (0, 2):
        assert reports[r]["sum"] == [2.0] and reports[r]["gather"] == [0.0, 2.0]
        assert reports[r]["bcast"] == [2.0] and reports[r]["grad"] == [2.0]
        assert reports[r]["bcast_"] == [2.0]
        assert reports[r]["included"] == 1
    assert "not a member" in reports[1]["error"] or "not included" in reports[1]["error"], reports[1]
    assert reports[1]["included"] == 0
    assert all(rep["size"] == 2 for rep in reports)


def test_errors_raise_on_every_rank_and_engine_stays_usable():
    reports = op_ranks.run_program_ok(2, "ops:errors_then_a_good_allreduce", timeout=120)
    for r, rep in enumerate(reports):
        for key in ("shape", "dtype", "root", "graph_shape", "gather_rank"):
            assert rep[key][0] == "FailedPreconditionError", (key, r, rep[key])
        assert "shape" in rep["shape"][1].lower() and "HorovodAllreduce" in rep["shape"][1]
        assert "in_graph" in rep["graph_shape"][1]
        assert "type" in rep["dtype"][1].lower() or "dtype" in rep["dtype"][1].lower()
        assert "root" in rep["root"][1].lower()
        assert rep["bad_op"][0] == "ValueError"
        assert rep["bad_root"][0] == "InvalidArgumentError" and "root" in rep["bad_root"][1].lower()
        assert rep["string"][0] in ("TypeError", "InvalidArgumentError", "NotFoundError"), rep["string"]
        assert rep["unregistered_set"][0] == "ValueError"
        assert rep["after"] == [2.0, 2.0]


def test_uninitialized_and_dead_peer():
    results = op_ranks.run_program(2, "ops:uninitialized_then_dead_peer", timeout=60)
    first = results[0].stdout.strip().splitlines()
    import json
    assert json.loads(first[0])[0] == "FailedPrecondition" and "init" in json.loads(first[0])[1]
    verdict = json.loads(first[-1])
    # Horovod's elastic TF code recognises the op type at the start of the message
    assert verdict[0] == "Unknown" and "HorovodAllreduce" in verdict[1], results[0]


def test_divergent_eager_collectives_fail_on_every_rank_instead_of_hanging():
    # An eagerly executed op blocks its thread as a synchronous wait does:
    # ranks blocked on different ops are a divergence, reported on both
    # within HOROVOD_PEER_TIMEOUT_SECONDS. The engine then starts again.
    results = op_ranks.run_program_ok(2, "ops:divergent_eager_collectives",
                                      env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=60)
    for res in results:
        assert res["error"] and "diverged" in res["error"], res
        assert "HorovodAllreduce" in res["error"] and "HorovodAllgather" in res["error"], res
        assert res["seconds"] < 15, res
        assert res["after"] == [2.0, 2.0]


def test_divergent_graph_collectives_fail_on_every_rank_after_the_stall_time():
    # Inside tf.function only a completion callback waits for an op, so a
    # pending op counts as holding its rank once the stall warning names it
    # (HOROVOD_STALL_CHECK_TIME_SECONDS); then the peer timeout applies.
    results = op_ranks.run_program_ok(2, "ops:divergent_graph_collectives",
                                      env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2",
                                           "HOROVOD_STALL_CHECK_TIME_SECONDS": "2"},
                                      timeout=60)
    for res in results:
        assert res["error"] and "diverged" in res["error"], res
        assert "'only.rank0'" in res["error"] and "'only.rank1'" in res["error"], res
        assert 4 <= res["seconds"] < 15, res
        assert res["after"] == [2.0, 2.0]


def test_graph_collectives_submitted_in_different_orders_are_not_a_divergence():
    # Each rank submits one op of a graph 3 s before the other, in opposite
    # orders: every rank has an op pending that its peer has not submitted,
    # longer than the peer timeout. That is a graph running, not a divergence.
    results = op_ranks.run_program_ok(2, "ops:graph_collectives_submitted_in_opposite_orders",
                                      env={"HOROVOD_PEER_TIMEOUT_SECONDS": "1",
                                           "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"},
                                      timeout=60)
    for res in results:
        assert res == [[2.0, 2.0], [2.0, 2.0]], res


def test_an_eager_allreduce_is_never_held_but_a_graphs_burst_is():
    # Holds of 2 s (HVD_HOLD_GAP_US, HOROVOD_CYCLE_TIME): an eager op's
    # thread waits for it, so no more can follow and it goes at once; a
    # tf.function's allreduces are submitted by TF's executor without
    # waiting, so the engine holds them back for the rest of their burst
    # until the hold ends.
    results = op_ranks.run_program_ok(2, "ops:eager_allreduce_under_a_long_hold",
                                      env={"HVD_HOLD_GAP_US": "2000000", "HOROVOD_CYCLE_TIME": "2000"})
    for res in results:
        assert res["eager"] == [3.0] * 4 and res["graph"] == [[0.0] * 4, [3.0] * 4, [6.0] * 4], res
        assert res["eager_seconds"] < 1.5, res
        assert res["graph_seconds"] >= 1.5, res


def test_tensorflow_and_torch_in_one_process_share_the_engine():
    pytest.importorskip("torch")
    reports = op_ranks.run_program_ok(2, "ops:tensorflow_and_torch_in_one_process")
    for rep in reports:
        assert rep == [[3.0, 3.0], [3.0, 3.0], True, 2]


def test_version_mismatch_is_a_clear_import_error(tmp_path):
    # A copy of the package whose build record names another TF version.
    import shutil
    import horovod.tensorflow.mpi_ops as installed
    pkg = tmp_path / "horovod" / "tensorflow"
    shutil.copytree(os.path.dirname(installed.__file__), pkg)
    (pkg / "_build_info.py").write_text('TENSORFLOW_VERSION = "2.0.0"\nXLA_BUILT = False\n')
    code = ("import horovod; horovod.__path__.insert(0, %r)\n"
            "import horovod.tensorflow\n") % str(tmp_path / "horovod")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert res.returncode != 0
    assert "ImportError" in res.stderr and "built against TensorFlow 2.0.0" in res.stderr
    assert "Reinstall hvd-tensorflow" in res.stderr


def test_build_without_tensorflow_fails_clearly(tmp_path):
    # The package build runs CMake against the Python that builds it: one
    # without TensorFlow must stop with instructions, not a compiler error.
    bare = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    res = subprocess.run(["cmake", "-S", src, "-B", str(tmp_path / "build"),
                          "-DPython_EXECUTABLE=%s" % (bare / "bin" / "python")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "import tensorflow" in res.stderr and "Install TensorFlow first" in res.stderr, res.stderr
