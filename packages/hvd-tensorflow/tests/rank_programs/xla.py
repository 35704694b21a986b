# xla.py - rank side of test_xla.py: Horovod TF collectives inside
# tf.function(jit_compile=True) against eager, their HLO, errors under jit,
# and a peer dying under jit. One program runs every check, so TensorFlow is
# imported once per rank.
"""Rank programs for test_xla.py."""

import os
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow.mpi_ops as hvd
from rank_programs import tensorflow_threads

tensorflow_threads.limit()


def jit(fn):
    """fn as an XLA-compiled tf.function."""
    return tf.function(fn, jit_compile=True)


def same(a, b):
    """Same dtype, shape and (close) values."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.allclose(a, b)


def error_of(fn, *args):
    """What fn(*args) raised, as {type, message}; None when it returned."""
    try:
        fn(*args)
    except Exception as e:
        return {"type": type(e).__name__, "message": str(e)}
    return None


def every_check():
    """Runs every check once; returns {check: result}."""
    hvd.init()
    rank = hvd.rank()
    report = {"xla_built": hvd.xla_built()}

    # --- allreduce: sum/average, several dtypes, scale factors ------------------
    x32 = tf.constant([[1.5, -2.0, 3.0], [0.25, 4.0, -1.0]]) * (rank + 1)
    xi = tf.constant([3, -7, 11], tf.int32) * (rank + 2)
    x64 = tf.constant([1.0, 2.0, 4.0], tf.float64) * (rank + 1)

    def reductions(a, b, c):
        return (hvd._allreduce(a, name="ar.sum", op=hvd.Sum),
                hvd._allreduce(a, name="ar.avg", op=hvd.Average),
                hvd._allreduce(b, name="ar.int", op=hvd.Sum),
                hvd._allreduce(b, name="ar.max", op=hvd.Max),
                hvd._allreduce(c, name="ar.scaled", op=hvd.Average, prescale_factor=0.5, postscale_factor=3.0))

    compiled = jit(reductions)(x32, xi, x64)
    eager = reductions(x32, xi, x64)
    base_i = xi // (rank + 2)
    expected = (x32 / (rank + 1) * 3, x32 / (rank + 1) * 1.5, base_i * 5, tf.maximum(base_i * 2, base_i * 3),
                x64 / (rank + 1) * 1.5 * 0.5 * 3.0)
    expected = [tf.cast(e, c.dtype) for e, c in zip(expected, compiled)]
    report["allreduce_equals_eager"] = all(same(c, e) for c, e in zip(compiled, eager))
    report["allreduce_expected"] = all(same(c, e) for c, e in zip(compiled, expected))
    hlo = jit(reductions).experimental_get_compiler_ir(x32, xi, x64)(stage="hlo")
    report["allreduce_hlo_custom_calls"] = hlo.count('custom_call_target="hvd_allreduce"')
    report["allreduce_hlo_side_effect"] = "custom_call_has_side_effect=true" in hlo
    report["allreduce_hlo_names"] = all('name = "%s"' % n in hlo for n in ("ar.sum", "ar.avg", "ar.scaled"))

    def grouped(a, b):
        return hvd._grouped_allreduce([a, b], name="ar.group", op=hvd.Average)

    report["grouped_allreduce_equals_eager"] = all(
        same(c, e) for c, e in zip(jit(grouped)(x32, x32 * 2), grouped(x32, x32 * 2)))

    def adasum(a):
        return hvd._allreduce(a, name="ar.adasum", op=hvd.Adasum)

    # Orthogonal per-rank vectors add up under Adasum; compiled equals eager.
    basis = tf.one_hot(rank, 4, dtype=tf.float32) * (rank + 1)
    report["adasum_equals_eager"] = same(jit(adasum)(basis), adasum(basis))
    report["adasum_expected"] = same(jit(adasum)(basis), tf.constant([1.0, 2.0, 0.0, 0.0]))

    # --- allgather: first dimension differs per rank --------------------------
    rows = rank + 1
    g32 = tf.reshape(tf.range(rows * 3, dtype=tf.float32), [rows, 3]) + 100 * rank
    gi64 = tf.fill([rows + 1], tf.constant(rank + 10, tf.int64))
    gbool = tf.constant([True, False][: rows])

    def gathers(a, b, c):
        return (hvd.allgather(a, name="ag.f32"), hvd.allgather(b, name="ag.i64"), hvd.allgather(c, name="ag.bool"),
                hvd.grouped_allgather([a, a * 2], name="ag.group"))

    c_ag, e_ag = jit(gathers)(g32, gi64, gbool), gathers(g32, gi64, gbool)
    report["allgather_equals_eager"] = (all(same(c, e) for c, e in zip(c_ag[:3], e_ag[:3]))
                                        and all(same(c, e) for c, e in zip(c_ag[3], e_ag[3])))
    report["allgather_shapes"] = [list(t.shape) for t in c_ag[:3]]
    report["allgather_rows"] = np.asarray(c_ag[0])[:, 0].tolist()
    report["allgather_hlo"] = 'custom_call_target="hvd_allgather"' in \
        jit(gathers).experimental_get_compiler_ir(g32, gi64, gbool)(stage="hlo")
    # New first dimensions on every rank: every rank recompiles together.
    bigger = tf.concat([g32, g32], 0)
    report["allgather_recompiled"] = same(jit(gathers)(bigger, gi64, gbool)[0], gathers(bigger, gi64, gbool)[0])

    # --- broadcast from root 1 ------------------------------------------------
    def bcast(a, b):
        return hvd.broadcast(a, 1, name="bc.f32"), hvd.broadcast(b, 1, name="bc.bool")

    bb = tf.constant([rank == 0, rank == 1, True])
    c_bc, e_bc = jit(bcast)(x32, bb), bcast(x32, bb)
    report["broadcast_equals_eager"] = all(same(c, e) for c, e in zip(c_bc, e_bc))
    report["broadcast_from_root_1"] = (same(c_bc[0], x32 / (rank + 1) * 2)
                                       and c_bc[1].numpy().tolist() == [False, True, True])
    report["broadcast_hlo"] = 'custom_call_target="hvd_broadcast"' in \
        jit(bcast).experimental_get_compiler_ir(x32, bb)(stage="hlo")

    # --- broadcast_: variables overwritten in place with root 1's values -------
    # Same variable names on both ranks, so the default engine names match.
    def fresh_variables():
        return (tf.Variable(tf.constant([1.0, 2.0, 3.0]) * (rank + 1), name="bi.a"),
                tf.Variable(tf.fill([2, 2], float(rank + 5)), name="bi.b"),
                tf.Variable(tf.constant([7, -8], tf.int32) * (rank + 1), name="bi.i"))

    fa, fb, fi = fresh_variables()

    def bcast_inplace():
        # In a tf.function broadcast_ returns the values read after the broadcast.
        return hvd.broadcast_([fa, fb], root_rank=1), hvd.broadcast_([fi], root_rank=1, name="bi.int")

    read_back = jit(bcast_inplace)()
    compiled = [v.numpy() for v in (fa, fb, fi)]
    ea, eb, ei = fresh_variables()
    hvd.broadcast_([ea, eb], root_rank=1)
    hvd.broadcast_([ei], root_rank=1)
    report["broadcast_inplace_equals_eager"] = all(same(c, e) for c, e in zip(compiled, (ea, eb, ei)))
    report["broadcast_inplace_from_root_1"] = [v.tolist() for v in compiled]
    report["broadcast_inplace_read_back"] = all(
        same(r, c) for r, c in zip(list(read_back[0]) + list(read_back[1]), compiled))
    hlo = jit(bcast_inplace).experimental_get_compiler_ir()(stage="hlo")
    report["broadcast_inplace_hlo_custom_calls"] = hlo.count('custom_call_target="hvd_broadcast"')
    report["broadcast_inplace_hlo_int_name"] = 'name = "bi.int"' in hlo

    # --- reducescatter: 5 rows split 3/2 --------------------------------------
    rs = tf.reshape(tf.range(10, dtype=tf.float32), [5, 2]) * (rank + 1)

    def scatters(a):
        return (hvd._reducescatter(a, name="rs.sum", op=hvd.Sum),
                hvd._reducescatter(a, name="rs.avg", op=hvd.Average),
                hvd._grouped_reducescatter([a, a + 1], name="rs.group", op=hvd.Sum))

    c_rs, e_rs = jit(scatters)(rs), scatters(rs)
    report["reducescatter_equals_eager"] = (all(same(c, e) for c, e in zip(c_rs[:2], e_rs[:2]))
                                            and all(same(c, e) for c, e in zip(c_rs[2], e_rs[2])))
    report["reducescatter_rows"] = c_rs[0].shape[0]

    # --- alltoall: explicit (uneven) splits, splits=None, splits as an argument --
    a2 = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]) + 100 * rank
    a2b = tf.constant([rank == 0, True, False, rank == 1])
    sp = [1, 3] if rank == 0 else [2, 2]   # rank 0 receives 1 + 2 rows, rank 1 3 + 2

    def exchanges(a, b):
        o1, r1 = hvd.alltoall(a, splits=sp, name="a2a.explicit")
        o2 = hvd.alltoall(b, name="a2a.even")  # splits=None: the output alone
        return o1, r1, o2

    c_a2, e_a2 = jit(exchanges)(a2, a2b), exchanges(a2, a2b)
    report["alltoall_equals_eager"] = all(same(c, e) for c, e in zip(c_a2, e_a2))
    report["alltoall_received_splits"] = c_a2[1].numpy().tolist()
    report["alltoall_rows"] = np.asarray(c_a2[0])[:, 0].tolist()
    report["alltoall_hlo"] = jit(exchanges).experimental_get_compiler_ir(a2, a2b)(stage="hlo").count(
        'custom_call_target="hvd_alltoall"')
    a2a_arg = jit(lambda a, s: hvd.alltoall(a, splits=s, name="a2a.arg"))
    report["alltoall_splits_argument"] = all(same(c, e) for c, e in zip(
        a2a_arg(a2, tf.constant(sp)), hvd.alltoall(a2, splits=tf.constant(sp), name="a2a.arg")))
    v2 = tf.Variable(a2)

    def a2a_grad():
        # received_splits is a constant of the program, so the gradient's alltoall
        # (splits=received_splits) compiles too.
        with tf.GradientTape() as tape:
            o, _ = hvd.alltoall(v2 * v2, splits=sp, name="grad.a2a")
            loss = tf.reduce_sum(o * tf.cast(tf.range(tf.shape(o)[0]) + 1, o.dtype)[:, None])
        return tape.gradient(loss, v2)

    report["alltoall_gradient_equals_eager"] = same(jit(a2a_grad)(), a2a_grad())

    # --- join: rank 0 joins first and serves rank 1's allreduce with zeros -----
    def join_late(compiled):
        ar, join = (lambda t: hvd._allreduce(t, name="join.ar", op=hvd.Sum)), hvd.join
        if compiled:
            ar, join = jit(ar), jit(join)
        reduced = None
        if rank == 1:
            time.sleep(0.5)
            reduced = ar(x32)
        return reduced, int(join())

    c_j, e_j = join_late(True), join_late(False)
    report["join_last_rank"] = [c_j[1], e_j[1]]
    # Only rank 1 reduced: the joined rank 0 contributed zeros.
    report["join_allreduce_equals_eager"] = rank == 0 or (same(c_j[0], e_j[0]) and same(c_j[0], x32))
    report["join_hlo"] = 'custom_call_target="hvd_join"' in \
        jit(hvd.join).experimental_get_compiler_ir()(stage="hlo")

    # --- names: ignore_name_scope lets ranks in different scopes match --------
    def scoped(a):
        with tf.name_scope("rank%d" % rank):
            return hvd._allreduce(a, name="scoped", op=hvd.Sum, ignore_name_scope=True)

    report["ignore_name_scope"] = same(jit(scoped)(x32), x32 / (rank + 1) * 3)

    # --- gradients computed inside the XLA program ----------------------------
    w = tf.Variable(tf.constant([1.0, 2.0, 3.0]) * (rank + 1))

    def loss_and_grad():
        with tf.GradientTape() as tape:
            r = hvd._allreduce(w * w, name="grad.ar", op=hvd.Average)
            b = hvd.broadcast(w, 0, name="grad.bc")
            loss = tf.reduce_sum(r * tf.constant([1.0, 10.0, 100.0])) + tf.reduce_sum(b)
        return tape.gradient(loss, w)

    report["gradient_equals_eager"] = same(jit(loss_and_grad)(), loss_and_grad())

    # --- errors: every rank fails, nothing hangs, the engine stays usable ------
    t0 = time.monotonic()
    err = error_of(jit(lambda a: hvd._allreduce(a, name="bad.shape", op=hvd.Sum)), tf.ones([2 + rank]))
    report["mismatch_error"] = err
    err = error_of(jit(lambda a: hvd.allgather(a, name="bad.gather")), tf.ones([2, 2 + rank]))
    report["allgather_trailing_mismatch_error"] = err
    # Rank 0 changes its first dimension and recompiles; rank 1 reuses its program.
    ag = jit(lambda a: hvd.allgather(a, name="stale.gather"))
    ag(tf.ones([1 + rank, 2]))
    report["stale_allgather_error"] = error_of(ag, tf.ones([4 if rank == 0 else 2, 2]))
    # Rank 1's splits do not add up to its first dimension: it fails compilation
    # with the engine's InvalidArgumentError, rank 0 (whose splits are fine) with
    # a FailedPreconditionError naming rank 1.
    report["alltoall_bad_splits_error"] = error_of(
        jit(lambda a: hvd.alltoall(a, splits=[1, 3] if rank == 0 else [1, 1], name="bad.a2a")), a2)
    report["alltoall_trailing_mismatch_error"] = error_of(
        jit(lambda a: hvd.alltoall(a, name="bad.a2a.rows")), tf.ones([2, 2 + rank]))
    # Splits from a stateful op are not known when compiling. (Splits computed
    # from arguments, variables or constants are: TensorFlow evaluates them and
    # XLA compiles once per value.)
    def dynamic_splits(a):
        return hvd.alltoall(a, splits=tf.cast(tf.random.uniform([2], 2.0, 2.5), tf.int32), name="dyn.a2a")

    report["alltoall_dynamic_splits_error"] = error_of(jit(dynamic_splits), a2)
    # Rank 0 changes its splits and recompiles; rank 1 reuses its program.
    stale = jit(lambda a, s: hvd.alltoall(a, splits=s, name="stale.a2a"))
    stale(a2, tf.constant([2, 2]))
    report["stale_alltoall_error"] = error_of(stale, a2, tf.constant([1, 3] if rank == 0 else [2, 2]))
    report["errors_seconds"] = time.monotonic() - t0
    report["usable_after_errors"] = same(jit(lambda a: hvd._allreduce(a, name="after", op=hvd.Sum))(x32),
                                         x32 / (rank + 1) * 3)
    return report


def dead_peer_under_jit():
    """Rank 1 exits after one compiled allreduce; rank 0 returns what its next one raised, and when."""
    hvd.init()
    f = tf.function(lambda a: hvd._allreduce(a, name="before.death", op=hvd.Sum), jit_compile=True)
    f(tf.ones([4]))
    if hvd.rank() == 1:
        os._exit(0)
    g = tf.function(lambda a: hvd._allreduce(a, name="after.death", op=hvd.Sum), jit_compile=True)
    t0 = time.monotonic()
    try:
        g(tf.ones([4]))
        err = None
    except Exception as e:
        err = {"type": type(e).__name__, "message": str(e)}
    return {"error": err, "seconds": time.monotonic() - t0}
