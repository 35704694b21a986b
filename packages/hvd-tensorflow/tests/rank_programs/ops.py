# ops.py - rank side of test_ops.py: the TF op layer
# (horovod.tensorflow.mpi_ops) eagerly and inside tf.function, gradients,
# process sets, errors, divergence and a dead peer. Each program checks many
# things, as a TensorFlow process start costs seconds.
"""Rank programs for test_ops.py."""

import os
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow.mpi_ops as ops
from horovod.common import testing
from rank_programs import tensorflow_threads

tensorflow_threads.limit()


def every_collective_eager_and_tf_function(dtypes):
    """Each collective of `dtypes` (and bool), eagerly and in tf.function; returns {check: result}."""
    ops.init()
    r, n = ops.rank(), ops.size()
    out = {}

    def eager_and_graph(key, fn, *args):
        # the same collective eagerly and inside tf.function: both must agree
        e = fn(*args)
        g = tf.function(fn)(*args)
        out[key] = [np.asarray(e).tolist(), np.asarray(g).tolist()]

    for dt in dtypes:
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
    return out


def bfloat16_sum():
    """Sums 1000 bfloat16 values; returns [result dtype, first element, bfloat16(0.21)]."""
    ops.init()
    x = tf.cast(tf.fill([1000], 0.1 + 0.01 * ops.rank()), tf.bfloat16)
    s = ops._allreduce(x, op=ops.Sum)
    return [s.dtype.name, float(tf.cast(s[0], tf.float32)), float(tf.cast(tf.cast(0.21, tf.bfloat16), tf.float32))]


def eager_allreduce_under_a_long_hold():
    """An eager allreduce, then a tf.function of three, under holds of 2 s
    (set by the test): returns the seconds each took and their results."""
    ops.init()
    x = tf.fill([4], float(ops.rank() + 1))
    start = time.monotonic()
    eager = ops._allreduce(x, op=ops.Sum, name="eager")
    eager_seconds = time.monotonic() - start

    @tf.function
    def three(t):
        return [ops._allreduce(t * float(i), op=ops.Sum, name="graph.%d" % i) for i in range(3)]

    start = time.monotonic()
    graph = three(x)
    graph_seconds = time.monotonic() - start
    return {"eager": eager.numpy().tolist(), "eager_seconds": eager_seconds,
            "graph": [g.numpy().tolist() for g in graph], "graph_seconds": graph_seconds}


def gradients():
    """The gradient of every collective (and allgather in tf.function); returns {collective: gradient}."""
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
    out["reducescatter_sum"] = tape.gradient(rs_sum, y2,
                                             output_gradients=tf.ones_like(rs_sum) * (r + 1)).numpy().ravel().tolist()
    # the same inside tf.function

    @tf.function
    def graph_grad(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.reduce_sum(ops.allgather(v * 2.0))
        return tape.gradient(y, v)
    out["allgather_graph"] = graph_grad(x).numpy().tolist()
    return out


def process_set_of_even_ranks():
    """Collectives on the set [0, 2]; rank 1 returns what using it raised."""
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
    return out


def errors_then_a_good_allreduce():
    """Returns {case: [exception class, message] or "no error"} and a final allreduce."""
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
    return out


def uninitialized_then_dead_peer():
    """Reports what an op before init raised; rank 1 then dies, rank 0 returns what its ops raised."""
    try:
        ops._allreduce(tf.ones([1]))
        testing.report("no error")
    except tf.errors.FailedPreconditionError as e:
        testing.report(["FailedPrecondition", str(e)])
    ops.init()
    if ops.rank() == 1:
        os._exit(3)  # dies without a word to the others
    try:
        for _ in range(100):
            ops._allreduce(tf.ones([4]))
            time.sleep(0.1)
        return "no error"
    except tf.errors.UnknownError as e:
        return ["Unknown", str(e)]


def _diverge_then_start_again(diverge):
    """Runs `diverge` (this rank's side of a divergence), then a new engine's allreduce.

    Returns the UnknownError's text (None if nothing was raised), how long it
    took to come, and the later allreduce's result.
    """
    start = time.monotonic()
    try:
        diverge()
        out = {"error": None}
    except tf.errors.UnknownError as e:
        out = {"error": str(e)}
    out["seconds"] = time.monotonic() - start
    ops.init()
    out["after"] = ops._allreduce(tf.ones([2]), op=ops.Sum).numpy().tolist()
    return out


def divergent_eager_collectives():
    """Rank 0 allreduces, rank 1 allgathers, eagerly; returns the error, its delay and a later allreduce."""
    ops.init()

    def diverge():
        if ops.rank() == 0:
            ops._allreduce(tf.ones([2]))
        else:
            ops.allgather(tf.ones([2]))
    return _diverge_then_start_again(diverge)


def divergent_graph_collectives():
    """As divergent_eager_collectives, each op inside its own tf.function."""
    ops.init()

    @tf.function
    def on_rank_0(x):
        return ops._allreduce(x, name="only.rank0")

    @tf.function
    def on_rank_1(x):
        return ops.allgather(x, name="only.rank1")
    return _diverge_then_start_again(lambda: (on_rank_0 if ops.rank() == 0 else on_rank_1)(tf.ones([2])))


def graph_collectives_submitted_in_opposite_orders():
    """Two allreduces of one tf.function, submitted 3 s apart in opposite orders; returns both results."""
    ops.init()

    def later(x):
        return tf.py_function(lambda t: (time.sleep(3), t)[1], [x], tf.float32)

    @tf.function
    def step(x):
        first, second = (x, later(x)) if ops.rank() == 0 else (later(x), x)
        return ops._allreduce(first, name="a", op=ops.Sum), ops._allreduce(second, name="b", op=ops.Sum)
    a, b = step(tf.ones([2]))
    return [a.numpy().tolist(), b.numpy().tolist()]


def tensorflow_and_torch_in_one_process():
    """Allreduces through horovod.torch and horovod.tensorflow; returns both results and TF's view of the engine."""
    import torch
    import horovod.torch as hvd_torch
    hvd_torch.init()
    t = hvd_torch.allreduce(torch.ones(2) * (hvd_torch.rank() + 1), op=hvd_torch.Sum)
    g = ops._allreduce(tf.ones([2]) * (ops.rank() + 1), op=ops.Sum)
    return [t.tolist(), g.numpy().tolist(), ops.is_initialized(), ops.size()]
