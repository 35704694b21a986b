# test_ops.py - the TF op layer (horovod.tensorflow.mpi_ops) at 2 and 3 real
# ranks: every collective in eager mode and inside tf.function, every dtype,
# gradients, process sets, topology ops, and errors on every rank. Each
# launch checks many things: a TF process start costs seconds.
import os
import subprocess
import sys

import pytest

import op_ranks

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

COLLECTIVES = r'''
ops.init()
r, n = ops.rank(), ops.size()
out = {}
def eager_and_graph(key, fn, *args):
    # the same collective eagerly and inside tf.function: both must agree
    e = fn(*args)
    g = tf.function(fn)(*args)
    out[key] = [np.asarray(e).tolist(), np.asarray(g).tolist()]

for dt in %(dtypes)r:
    dtype = tf.dtypes.as_dtype(dt)
    x = tf.cast(tf.reshape(tf.range(6), [2, 3]) + r, dtype)
    eager_and_graph("sum." + dt, lambda t: tf.cast(ops._allreduce(t, op=ops.Sum), tf.float64), x)
    eager_and_graph("min." + dt, lambda t: tf.cast(ops._allreduce(t, op=ops.Min), tf.float64), x)
    eager_and_graph("max." + dt, lambda t: tf.cast(ops._allreduce(t, op=ops.Max), tf.float64), x)
    eager_and_graph("gather." + dt, lambda t: tf.cast(ops.allgather(t[:r + 1]), tf.float64), x)
    eager_and_graph("bcast." + dt, lambda t: tf.cast(ops.broadcast(t, root_rank=n - 1), tf.float64), x)
    if dtype.is_floating:
        eager_and_graph("avg." + dt, lambda t: tf.cast(ops._allreduce(t, op=ops.Average), tf.float64), x)
        eager_and_graph("scaled." + dt, lambda t: tf.cast(
            ops._allreduce(t, op=ops.Sum, prescale_factor=0.5, postscale_factor=4.0), tf.float64), x)
        eager_and_graph("prod." + dt, lambda t: tf.cast(ops._allreduce(t, op=ops.Product), tf.float64), x)

b = tf.constant([r == 0, True, False])
eager_and_graph("gather.bool", lambda t: ops.allgather(t), b)
eager_and_graph("bcast.bool", lambda t: ops.broadcast(t, root_rank=1), b)

# grouped
eager_and_graph("grouped", lambda a, c: tf.concat([tf.reshape(t, [-1]) for t in
                ops._grouped_allreduce([a, c], op=ops.Sum)], 0),
                tf.ones([3]) * (r + 1), tf.ones([2, 2]) * 10.0)
eager_and_graph("grouped_gather", lambda a, c: tf.concat([tf.reshape(t, [-1]) for t in
                ops.grouped_allgather([a, c])], 0), tf.fill([r + 1], float(r)), tf.fill([1, 2], 7.0 + r))
# reducescatter: 2n rows; rank r keeps rows [2r, 2r+2)
rows = tf.reshape(tf.range(2 * n * 2, dtype=tf.float32), [2 * n, 2]) * (r + 1)
eager_and_graph("rs_sum", lambda t: ops._reducescatter(t, op=ops.Sum), rows)
eager_and_graph("rs_avg", lambda t: ops._reducescatter(t, op=ops.Average), rows)
eager_and_graph("grouped_rs", lambda a, c: tf.concat([tf.reshape(t, [-1]) for t in
                ops._grouped_reducescatter([a, c], op=ops.Sum)], 0), rows, rows * 2)
# alltoall: rank r sends (i + 1) rows to rank i, each row tagged 100 * r + i
send = tf.concat([tf.fill([i + 1, 2], 100 * r + i) for i in range(n)], 0)
splits = tf.constant([i + 1 for i in range(n)], tf.int32)
def a2a(t, s):
    o, rs = ops.alltoall(t, splits=s)
    return tf.concat([tf.reshape(tf.cast(o, tf.int32), [-1]), rs], 0)
eager_and_graph("alltoall", a2a, send, splits)
# splits=None returns the output tensor alone, as Horovod's alltoall does
even = ops.alltoall(tf.range(2 * n) + 10 * r)
out["alltoall_even"] = [even.numpy().tolist(), isinstance(even, tf.Tensor)]

# in-place broadcast into variables of two dtypes
v1, v2 = tf.Variable([float(r)] * 3), tf.Variable([r, r], dtype=tf.int64)
ops.broadcast_([v1, v2], root_rank=1)
out["bcast_inplace"] = [v1.numpy().tolist(), v2.numpy().tolist()]
@tf.function
def bcast_in_graph():
    ops.broadcast_([v1], root_rank=0)
v1.assign([5.0 + r] * 3)
bcast_in_graph()
out["bcast_inplace_graph"] = v1.numpy().tolist()
# TF1 graph: a reference variable (no resource handle) next to a resource one
with tf.Graph().as_default():
    from tensorflow.python.ops.ref_variable import RefVariable  # a TF1 reference variable
    ref_v = RefVariable([float(r)] * 2)
    res_v = tf.compat.v1.get_variable("res_v", initializer=[10.0 + r], use_resource=True)
    outs = ops.broadcast_([ref_v, res_v], root_rank=1)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())  # rank-dependent values first
        got = sess.run(outs)
        out["bcast_inplace_ref"] = [got[0].tolist(), got[1].tolist(), sess.run(ref_v).tolist()]

# topology ops, evaluated when the graph runs
out["topology"] = [int(t) for t in tf.function(lambda: (ops.size_op(), ops.rank_op(), ops.local_size_op(),
                                                        ops.local_rank_op(), ops.process_set_included_op()))()]
# several collectives in flight inside one graph: TF may start them in any
# order on each rank; the engine matches them by name
@tf.function
def many(t):
    return tf.add_n([ops._allreduce(t * k, op=ops.Sum) for k in range(1, 9)])
out["many"] = many(tf.ones([4])).numpy().tolist()
out["join"] = int(ops.join())
print(json.dumps(out))
'''


def _expected(n, r_seen):
    """What every rank must see, computed here from the inputs the snippet builds."""
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
    reports = op_ranks.run_ok(n, COLLECTIVES % {"dtypes": DTYPES}, timeout=240)
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
    reports = op_ranks.run_ok(2, '''
ops.init()
x = tf.cast(tf.fill([1000], 0.1 + 0.01 * ops.rank()), tf.bfloat16)
s = ops._allreduce(x, op=ops.Sum)
print(json.dumps([s.dtype.name, float(tf.cast(s[0], tf.float32)), float(tf.cast(tf.cast(0.21, tf.bfloat16), tf.float32))]))
''')
    for dtype, got, want in reports:
        assert dtype == "bfloat16" and got == want


GRADIENTS = r'''
ops.init()
r, n = ops.rank(), ops.size()
out = {}
x = tf.constant([1.0, 2.0, 3.0]) * (r + 1)
def grad(fn, upstream=None):
    # upstream: the output gradient, or a function of the output giving it
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    if callable(upstream):
        upstream = upstream(y)
    return tape.gradient(y, x, output_gradients=upstream).numpy().tolist()
# allreduce: gradient of sum(allreduce_sum(x * w)) is the summed upstream gradient
out["allreduce_sum"] = grad(lambda t: ops._allreduce(t * 2.0, op=ops.Sum), tf.ones([3]) * (r + 1))
out["allreduce_avg"] = grad(lambda t: ops._allreduce(t, op=ops.Average), tf.ones([3]) * (r + 1))
out["grouped"] = grad(lambda t: tf.add_n(ops._grouped_allreduce([t, t * 3.0], op=ops.Sum)))
# allgather: rows of this rank get the average upstream gradient over ranks
out["allgather"] = grad(lambda t: ops.allgather(t), tf.range(3.0 * n) * (r + 1))
# broadcast: only the root gets a gradient (the average over ranks)
out["broadcast"] = grad(lambda t: ops.broadcast(t, root_rank=1), tf.ones([3]) * (r + 1))
# alltoall: gradients travel back along the received splits
out["alltoall"] = grad(lambda t: ops.alltoall(t, splits=[1, 2])[0], lambda y: tf.ones_like(y) * (r + 10))
# reducescatter on 2 rows per rank
y2 = tf.ones([2 * n, 1]) * (r + 1)
with tf.GradientTape(persistent=True) as tape:  # two gradients are taken from it
    tape.watch(y2)
    rs = ops._reducescatter(y2, op=ops.Average)
    rs_sum = ops._reducescatter(y2, op=ops.Sum)
out["reducescatter"] = tape.gradient(rs, y2, output_gradients=tf.ones_like(rs) * (r + 1)).numpy().ravel().tolist()
out["reducescatter_sum"] = tape.gradient(rs_sum, y2, output_gradients=tf.ones_like(rs_sum) * (r + 1)).numpy().ravel().tolist()
# the same inside tf.function
@tf.function
def graph_grad(v):
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = tf.reduce_sum(ops.allgather(v * 2.0))
    return tape.gradient(y, v)
out["allgather_graph"] = graph_grad(x).numpy().tolist()
print(json.dumps(out))
'''


def test_gradients():
    reports = op_ranks.run_ok(2, GRADIENTS)
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
    reports = op_ranks.run_ok(3, '''
even = ops.ProcessSet([0, 2])
ops.init(process_sets=[even])
r = ops.rank()
out = {}
if even.included():
    x = tf.constant([float(r)])
    out["sum"] = ops._allreduce(x, op=ops.Sum, process_set=even).numpy().tolist()
    out["gather"] = ops.allgather(x, process_set=even).numpy().tolist()
    out["bcast"] = ops.broadcast(x, root_rank=2, process_set=even).numpy().tolist()  # a global rank
    v = tf.Variable([float(r)])
    ops.broadcast_([v], root_rank=2, process_set=even)
    out["bcast_"] = v.numpy().tolist()
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = ops._allreduce(x, op=ops.Sum, process_set=even)
    out["grad"] = tape.gradient(y, x).numpy().tolist()
else:
    try:
        ops._allreduce(tf.ones([1]), process_set=even)
    except tf.errors.OpError as e:
        out["error"] = type(e).__name__ + ": " + str(e)[:300]
out["size"] = int(ops.size_op(process_set_id=even.process_set_id))
out["included"] = int(ops.process_set_included_op(process_set_id=even.process_set_id))
print(json.dumps(out))
''')
    for r in (0, 2):
        assert reports[r]["sum"] == [2.0] and reports[r]["gather"] == [0.0, 2.0]
        assert reports[r]["bcast"] == [2.0] and reports[r]["grad"] == [2.0]
        assert reports[r]["bcast_"] == [2.0]
        assert reports[r]["included"] == 1
    assert "not a member" in reports[1]["error"] or "not included" in reports[1]["error"], reports[1]
    assert reports[1]["included"] == 0
    assert all(rep["size"] == 2 for rep in reports)


ERRORS = r'''
ops.init()
r = ops.rank()
out = {}
def attempt(key, fn):
    try:
        fn()
        out[key] = "no error"
    except Exception as e:
        out[key] = [type(e).__name__, str(e)]
attempt("shape", lambda: ops._allreduce(tf.ones([r + 1])))
attempt("dtype", lambda: ops._allreduce(tf.ones([2], dtype=tf.float32 if r == 0 else tf.float64)))
attempt("root", lambda: ops.broadcast(tf.ones([2]), root_rank=r))
attempt("graph_shape", lambda: tf.function(lambda: ops._allreduce(tf.ones([2 + r]), name="in_graph"))())
attempt("gather_rank", lambda: ops.allgather(tf.ones([2, 2]) if r == 0 else tf.ones([2, 3])))
attempt("bad_op", lambda: ops._allreduce(tf.ones([2]), op=42))
attempt("bad_root", lambda: ops.broadcast(tf.ones([2]), root_rank=7))
attempt("string", lambda: ops._allreduce(tf.constant(["a"])))
attempt("unregistered_set", lambda: ops._allreduce(tf.ones([2]), process_set=ops.ProcessSet([0])))
# the engine stays usable after every error above
out["after"] = ops._allreduce(tf.ones([2]), op=ops.Sum).numpy().tolist()
print(json.dumps(out))
'''


def test_errors_raise_on_every_rank_and_engine_stays_usable():
    reports = op_ranks.run_ok(2, ERRORS, timeout=120)
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
    results = op_ranks.run(2, '''
try:
    ops._allreduce(tf.ones([1]))
    print(json.dumps("no error"))
except tf.errors.FailedPreconditionError as e:
    print(json.dumps(["FailedPrecondition", str(e)]))
ops.init()
if ops.rank() == 1:
    os._exit(3)  # dies without a word to the others
try:
    for _ in range(100):
        ops._allreduce(tf.ones([4]))
        time.sleep(0.1)
    print(json.dumps("no error"))
except tf.errors.UnknownError as e:
    print(json.dumps(["Unknown", str(e)]))
''', timeout=60)
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
    results = op_ranks.run_ok(2, '''
ops.init()
start = time.monotonic()
try:
    if ops.rank() == 0:
        ops._allreduce(tf.ones([2]))
    else:
        ops.allgather(tf.ones([2]))
    out = {"error": None}
except tf.errors.UnknownError as e:
    out = {"error": str(e)}
out["seconds"] = time.monotonic() - start
ops.init()
out["after"] = ops._allreduce(tf.ones([2]), op=ops.Sum).numpy().tolist()
print(json.dumps(out))
''', env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2"}, timeout=60)
    for res in results:
        assert res["error"] and "diverged" in res["error"], res
        assert "HorovodAllreduce" in res["error"] and "HorovodAllgather" in res["error"], res
        assert res["seconds"] < 15, res
        assert res["after"] == [2.0, 2.0]


def test_divergent_graph_collectives_fail_on_every_rank_after_the_stall_time():
    # Inside tf.function only a completion callback waits for an op, so a
    # pending op counts as holding its rank once the stall warning names it
    # (HOROVOD_STALL_CHECK_TIME_SECONDS); then the peer timeout applies.
    results = op_ranks.run_ok(2, '''
ops.init()
@tf.function
def on_rank_0(x):
    return ops._allreduce(x, name="only.rank0")
@tf.function
def on_rank_1(x):
    return ops.allgather(x, name="only.rank1")
start = time.monotonic()
try:
    (on_rank_0 if ops.rank() == 0 else on_rank_1)(tf.ones([2]))
    out = {"error": None}
except tf.errors.UnknownError as e:
    out = {"error": str(e)}
out["seconds"] = time.monotonic() - start
ops.init()
out["after"] = ops._allreduce(tf.ones([2]), op=ops.Sum).numpy().tolist()
print(json.dumps(out))
''', env={"HOROVOD_PEER_TIMEOUT_SECONDS": "2", "HOROVOD_STALL_CHECK_TIME_SECONDS": "2"}, timeout=60)
    for res in results:
        assert res["error"] and "diverged" in res["error"], res
        assert "'only.rank0'" in res["error"] and "'only.rank1'" in res["error"], res
        assert 4 <= res["seconds"] < 15, res
        assert res["after"] == [2.0, 2.0]


def test_graph_collectives_submitted_in_different_orders_are_not_a_divergence():
    # Each rank submits one op of a graph 3 s before the other, in opposite
    # orders: every rank has an op pending that its peer has not submitted,
    # longer than the peer timeout. That is a graph running, not a divergence.
    results = op_ranks.run_ok(2, '''
ops.init()
def later(x):
    return tf.py_function(lambda t: (time.sleep(3), t)[1], [x], tf.float32)
@tf.function
def step(x):
    first, second = (x, later(x)) if ops.rank() == 0 else (later(x), x)
    return ops._allreduce(first, name="a", op=ops.Sum), ops._allreduce(second, name="b", op=ops.Sum)
a, b = step(tf.ones([2]))
print(json.dumps([a.numpy().tolist(), b.numpy().tolist()]))
''', env={"HOROVOD_PEER_TIMEOUT_SECONDS": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"}, timeout=60)
    for res in results:
        assert res == [[2.0, 2.0], [2.0, 2.0]], res


def test_tensorflow_and_torch_in_one_process_share_the_engine():
    pytest.importorskip("torch")
    reports = op_ranks.run_ok(2, '''
import torch
import horovod.torch as hvd_torch
hvd_torch.init()
t = hvd_torch.allreduce(torch.ones(2) * (hvd_torch.rank() + 1), op=hvd_torch.Sum)
g = ops._allreduce(tf.ones([2]) * (ops.rank() + 1), op=ops.Sum)
print(json.dumps([t.tolist(), g.numpy().tolist(), ops.is_initialized(), ops.size()]))
''')
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
