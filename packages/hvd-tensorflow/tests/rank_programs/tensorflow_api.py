# tensorflow_api.py - rank side of test_tensorflow_api.py: horovod.tensorflow's
# collectives and helpers eagerly and inside tf.function, their gradients,
# variable and object broadcasts, SyncBatchNormalization against
# BatchNormalization on the concatenated batch, TF1 graph mode, and
# mismatched collectives. One program runs every check
# (checklist.run_checks), so TensorFlow starts once per rank; the tf-keras
# SyncBatchNormalization check is its own program, since the Keras flavour
# comes from TF_USE_LEGACY_KERAS in the rank's environment.
"""Rank programs for test_tensorflow_api.py."""

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from rank_programs import checklist, tensorflow_threads

tensorflow_threads.limit()


def both(fn):
    """fn()'s value as numpy; the same computation traced into a tf.function must give the same."""
    eager = tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, fn())
    graph = tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, tf.function(fn)())
    tf.nest.map_structure(lambda a, b: np.testing.assert_array_equal(a, b), eager, graph)
    return eager


def base(dtype=tf.float64, shape=(3, 4), r=None):
    """Rank r's input (default: this rank's): 0, 1, 2, ... plus 10 * r."""
    r = hvd.rank() if r is None else r
    return tf.cast(tf.reshape(tf.range(np.prod(shape)), shape) + 10 * r, dtype)


def api_surface(rank, size, per_rank):
    import inspect
    names = ["init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size", "local_size",
             "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous", "mpi_threads_supported",
             "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built",
             "cuda_built", "rocm_built", "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet",
             "global_process_set", "add_process_set", "remove_process_set", "HorovodInternalError",
             "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "broadcast_",
             "alltoall", "reducescatter", "grouped_reducescatter", "join", "barrier", "broadcast_variables",
             "broadcast_object", "broadcast_object_fn", "allgather_object", "DistributedGradientTape",
             "PartialDistributedGradientTape", "DistributedOptimizer", "SyncBatchNormalization", "Compression",
             "broadcast_global_variables", "BroadcastGlobalVariablesHook", "size_op", "rank_op",
             "local_size_op", "local_rank_op", "process_set_included_op"]
    missing = [n for n in names if not hasattr(hvd, n)]
    assert not missing, missing
    sig = inspect.signature(hvd.allreduce)
    assert list(sig.parameters) == ["tensor", "average", "device_dense", "device_sparse", "compression", "op",
                                    "prescale_factor", "postscale_factor", "name", "process_set",
                                    "ignore_name_scope"], sig
    assert inspect.signature(hvd.reducescatter).parameters["op"].default == hvd.Average
    assert inspect.signature(hvd.DistributedOptimizer).parameters["backward_passes_per_step"].default == 1
    assert list(inspect.signature(hvd.broadcast_variables).parameters) == ["variables", "root_rank",
                                                                            "process_set", "inplace"]
    assert hvd.Compression.none and hvd.Compression.fp16 and hvd.Compression.bf16


def allreduce_ops_and_dtypes(rank, size, per_rank):
    expect = {hvd.Sum: per_rank.sum(0), hvd.Average: per_rank.mean(0), hvd.Min: per_rank.min(0),
              hvd.Max: per_rank.max(0), hvd.Product: per_rank.prod(0)}
    for op, want in expect.items():
        got = both(lambda: hvd.allreduce(base(), op=op))
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=str(op))
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.int32, tf.int64, tf.uint8, tf.int8):
        got = both(lambda: hvd.allreduce(base(dtype, r=rank % 2), op=hvd.Sum))
        want = sum(base(dtype, r=r % 2) for r in range(size))
        assert got.dtype == dtype.as_numpy_dtype, (dtype, got.dtype)
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), err_msg=str(dtype))
    # default op is Average; the legacy `average` flag still works
    np.testing.assert_allclose(hvd.allreduce(base()).numpy(), per_rank.mean(0))
    np.testing.assert_allclose(hvd.allreduce(base(), average=False).numpy(), per_rank.sum(0))
    np.testing.assert_allclose(hvd.allreduce(base(), average=True).numpy(), per_rank.mean(0))
    try:
        hvd.allreduce(base(), average=True, op=hvd.Sum)
        raise AssertionError("average and op accepted together")
    except ValueError:
        pass
    # scale factors, names, variables as input
    got = both(lambda: hvd.allreduce(base(), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                                     name="scaled"))
    np.testing.assert_allclose(got, per_rank.sum(0) * 0.5)
    v = tf.Variable(base())
    np.testing.assert_allclose(hvd.allreduce(v, op=hvd.Sum, name="var").numpy(), per_rank.sum(0))
    with tf.name_scope("outer"):
        got = both(lambda: hvd.allreduce(base(), op=hvd.Max, name="scoped", ignore_name_scope=True))
    np.testing.assert_allclose(got, per_rank.max(0))


def allreduce_compression(rank, size, per_rank):
    x = base(tf.float32) / 7.0
    want = np.mean([base(tf.float32, r=r).numpy() / 7.0 for r in range(size)], 0)
    for comp, tol in ((hvd.Compression.none, 1e-6), (hvd.Compression.fp16, 1e-2), (hvd.Compression.bf16, 5e-2)):
        got = both(lambda: hvd.allreduce(x, compression=comp))
        assert got.dtype == np.float32, (comp, got.dtype)
        np.testing.assert_allclose(got, want, rtol=tol, err_msg=comp.__name__)
    # integers are never cast
    got = hvd.allreduce(tf.constant([1, 2], tf.int32), op=hvd.Sum, compression=hvd.Compression.fp16)
    assert got.dtype == tf.int32 and got.numpy().tolist() == [size, 2 * size]


def allreduce_indexed_slices(rank, size, per_rank):
    dense_shape = tf.constant([6, 2], tf.int64)
    def make():
        values = tf.constant([[1.0, 2.0]], tf.float64) * (rank + 1)
        return tf.IndexedSlices(values, tf.constant([rank], tf.int64), dense_shape)
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / size)):
        out = hvd.allreduce(make(), op=op)
        assert isinstance(out, tf.IndexedSlices)
        want = np.zeros((6, 2))
        for r in range(size):
            want[r] += np.array([1.0, 2.0]) * (r + 1) * scale
        np.testing.assert_allclose(tf.convert_to_tensor(out).numpy(), want)
        g = tf.function(lambda: tf.convert_to_tensor(hvd.allreduce(make(), op=op)))()
        np.testing.assert_allclose(g.numpy(), want)
    for bad in (dict(op=hvd.Max), dict(op=hvd.Sum, prescale_factor=2.0)):
        try:
            hvd.allreduce(make(), **bad)
            raise AssertionError("accepted %s" % bad)
        except NotImplementedError:
            pass


def grouped_allreduce_mixed(rank, size, per_rank):
    def run():
        sparse = tf.IndexedSlices(tf.ones([1, 3], tf.float32) * (rank + 1), tf.constant([rank]), tf.constant([4, 3]))
        return hvd.grouped_allreduce([base(), base(tf.float32), sparse, base(tf.int32)], op=hvd.Sum)
    out = run()
    np.testing.assert_allclose(out[0].numpy(), per_rank.sum(0))
    assert out[1].dtype == tf.float32 and out[3].dtype == tf.int32
    np.testing.assert_allclose(out[3].numpy(), per_rank.sum(0))
    dense = tf.convert_to_tensor(out[2]).numpy()
    np.testing.assert_allclose(dense[:size], np.arange(1, size + 1)[:, None] * np.ones((1, 3)))
    g = tf.function(lambda: [tf.convert_to_tensor(t) for t in run()])()
    np.testing.assert_allclose(g[0].numpy(), per_rank.sum(0))
    avg = both(lambda: hvd.grouped_allreduce([base(), base() * 2]))
    np.testing.assert_allclose(avg[1], per_rank.mean(0) * 2)
    assert hvd.grouped_allreduce([]) == []


def allgather_and_grouped(rank, size, per_rank):
    def mine(r):
        return tf.fill([r + 1, 2], float(r))
    want = np.concatenate([mine(r).numpy() for r in range(size)])
    np.testing.assert_array_equal(both(lambda: hvd.allgather(mine(rank))), want)
    got = both(lambda: hvd.grouped_allgather([mine(rank), tf.constant([[rank]] * (rank + 2), tf.float32)]))
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1].ravel(), np.concatenate([[r] * (r + 2) for r in range(size)]))
    np.testing.assert_array_equal(hvd.allgather(tf.constant([rank % 2 == 0])).numpy(),
                                  [r % 2 == 0 for r in range(size)])


def broadcast_and_inplace(rank, size, per_rank):
    root = size - 1
    np.testing.assert_array_equal(both(lambda: hvd.broadcast(base(), root)), per_rank[root])
    np.testing.assert_array_equal(hvd.broadcast(base(), 0, name="b0").numpy(), per_rank[0])
    vs = [tf.Variable(base()), tf.Variable(base(tf.int32)), tf.Variable(base(tf.float32))]
    hvd.broadcast_(vs, root)
    for v in vs:
        np.testing.assert_array_equal(v.numpy(), per_rank[root].astype(v.dtype.as_numpy_dtype))


def alltoall(rank, size, per_rank):
    # rank r sends r+1 rows... to every peer j: j+1 rows valued 100*r + j
    def run():
        parts = [tf.fill([j + 1, 2], float(100 * rank + j)) for j in range(size)]
        return hvd.alltoall(tf.concat(parts, 0), splits=[j + 1 for j in range(size)])
    out, received = both(run)
    assert received.tolist() == [rank + 1] * size, received
    want = np.concatenate([np.full([rank + 1, 2], 100.0 * r + rank) for r in range(size)])
    np.testing.assert_array_equal(out, want)
    even = hvd.alltoall(tf.reshape(tf.range(2 * size, dtype=tf.float32), [2 * size, 1]) + 100 * rank)
    assert even.shape[0] == 2 * size


def reducescatter(rank, size, per_rank):
    x = base(shape=(2 * size, 3))
    full = np.stack([base(shape=(2 * size, 3), r=r).numpy() for r in range(size)])
    got = both(lambda: hvd.reducescatter(x))  # default op: Average
    np.testing.assert_allclose(got, full.mean(0)[2 * rank:2 * rank + 2])
    got = both(lambda: hvd.reducescatter(x, op=hvd.Sum, name="rs_sum"))
    np.testing.assert_allclose(got, full.sum(0)[2 * rank:2 * rank + 2])
    a, b = both(lambda: hvd.grouped_reducescatter([x, tf.cast(x, tf.float32)], op=hvd.Sum))
    np.testing.assert_allclose(a, full.sum(0)[2 * rank:2 * rank + 2])
    assert b.dtype == np.float32


def join_barrier_topology_ops(rank, size, per_rank):
    last = hvd.join()
    assert 0 <= int(last) < size
    hvd.barrier()
    assert int(hvd.size_op()) == size and int(hvd.rank_op()) == rank
    assert int(hvd.local_size_op()) == hvd.local_size() and int(hvd.local_rank_op()) == hvd.local_rank()
    assert int(hvd.process_set_included_op(0)) == 1


def gradients(rank, size, per_rank):
    w = tf.constant(np.arange(12, dtype=np.float64).reshape(3, 4) * (rank + 1))
    w_all = np.stack([np.arange(12, dtype=np.float64).reshape(3, 4) * (r + 1) for r in range(size)])
    def grad(fn, gathered=False):
        weight = tf.tile(w, [size, 1]) if gathered else w
        def inner():
            x = base()
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(fn(x) * weight)
            return tape.gradient(loss, x)
        return both(inner)
    np.testing.assert_allclose(grad(lambda x: hvd.allreduce(x, op=hvd.Sum)), w_all.sum(0))
    np.testing.assert_allclose(grad(lambda x: hvd.allreduce(x, op=hvd.Average)), w_all.mean(0))
    np.testing.assert_allclose(grad(lambda x: hvd.grouped_allreduce([x], op=hvd.Sum)[0]), w_all.sum(0))
    # allgather: every rank's output holds our rows -> gradient is the
    # average of the ranks' output gradients over our rows (Horovod's rule)
    np.testing.assert_allclose(grad(lambda x: hvd.allgather(x), gathered=True), w_all.mean(0))
    # broadcast: the root's input receives the average, the others zero
    got = grad(lambda x: hvd.broadcast(x, 0))
    np.testing.assert_allclose(got, w_all.mean(0) if rank == 0 else np.zeros((3, 4)))


def broadcast_variables(rank, size, per_rank):
    root = 1 % size
    for inplace in (False, True):
        vs = [tf.Variable(base() + (1 if inplace else 0)), tf.Variable(base(tf.int32))]
        hvd.broadcast_variables(vs, root_rank=root, inplace=inplace)
        np.testing.assert_array_equal(vs[0].numpy(), per_rank[root] + (1 if inplace else 0))
        np.testing.assert_array_equal(vs[1].numpy(), per_rank[root].astype(np.int32))
    # inside a tf.function
    for inplace in (False, True):
        v = tf.Variable(base() * 3)
        @tf.function
        def step():
            hvd.broadcast_variables([v], root_rank=0, inplace=inplace)
        step()
        np.testing.assert_array_equal(v.numpy(), per_rank[0] * 3)


def objects(rank, size, per_rank):
    obj = {"rank": rank, "fn": (lambda a: a + rank), "blob": "x" * (1000 * (rank + 1))}
    got = hvd.broadcast_object(obj, root_rank=1 % size)
    assert got["rank"] == 1 % size and got["fn"](1) == 1 + 1 % size and len(got["blob"]) == 1000 * (1 % size + 1)
    got = hvd.broadcast_object(obj if rank == 0 else None)
    assert got["rank"] == 0
    fn = hvd.broadcast_object_fn(root_rank=0)
    assert fn([rank]) == [0]
    gathered = hvd.allgather_object({"r": rank, "pad": "y" * rank * 7})
    assert [g["r"] for g in gathered] == list(range(size)) and len(gathered[1 % size]["pad"]) == 7 * (1 % size)


def sync_batch_norm(rank, size, per_rank):
    counts = [r + 3 for r in range(size)]  # different batch sizes on purpose
    start = sum(counts[:rank])
    gen = np.random.RandomState(5)
    x_full = (gen.randn(sum(counts), 5, 4) * 3 + 1).astype(np.float32)
    w_out = gen.randn(sum(counts), 5, 4).astype(np.float32)
    mine = slice(start, start + counts[rank])
    ref = tf.keras.layers.BatchNormalization(momentum=0.7)
    sync = hvd.SyncBatchNormalization(momentum=0.7)
    for layer in (ref, sync):
        layer.build((None, 5, 4))
        layer.gamma.assign(np.linspace(0.5, 2.0, 4))
        layer.beta.assign(np.linspace(-1.0, 1.0, 4))
    assert sync.name.startswith("sync_batch_normalization")
    for step in range(2):
        xr = tf.constant(x_full)
        with tf.GradientTape() as tape:
            tape.watch(xr)
            out_ref = ref(xr, training=True)
            loss_ref = tf.reduce_sum(out_ref * w_out)
        gx_ref, gg_ref, gb_ref = tape.gradient(loss_ref, [xr, ref.gamma, ref.beta])
        x = tf.constant(x_full[mine])
        def step_fn(x):
            return sync(x, training=True)
        if step == 1:
            step_fn = tf.function(step_fn)
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = step_fn(x)
            loss = tf.reduce_sum(out * w_out[mine])
        gx, gg, gb = tape.gradient(loss, [x, sync.gamma, sync.beta])
        np.testing.assert_allclose(out.numpy(), out_ref.numpy()[mine], atol=2e-5, err_msg="forward")
        np.testing.assert_allclose(gx.numpy(), gx_ref.numpy()[mine], atol=2e-5, err_msg="input grad")
        np.testing.assert_allclose(hvd.allreduce(gg, op=hvd.Sum).numpy(), gg_ref.numpy(), atol=1e-4)
        np.testing.assert_allclose(hvd.allreduce(gb, op=hvd.Sum).numpy(), gb_ref.numpy(), atol=1e-4)
        np.testing.assert_allclose(sync.moving_mean.numpy(), ref.moving_mean.numpy(), atol=2e-5)
        np.testing.assert_allclose(sync.moving_variance.numpy(), ref.moving_variance.numpy(), atol=2e-5)
    # inference: moving statistics, local, no communication needed
    np.testing.assert_allclose(sync(x, training=False).numpy(), ref(xr, training=False).numpy()[mine], atol=2e-5)
    try:
        hvd.SyncBatchNormalization(fused=True)
        raise AssertionError("fused=True accepted")
    except ValueError:
        pass


def tf1_graph_mode(rank, size, per_rank):
    try:
        hvd.broadcast_global_variables(0)
        raise AssertionError("eager broadcast_global_variables accepted")
    except RuntimeError:
        pass
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.get_variable("a", initializer=tf.constant(np.full((2, 3), rank + 1.0)))
        b = tf.compat.v1.get_variable("b", initializer=tf.constant([rank * 10, 7], tf.int32))
        tf.compat.v1.train.get_or_create_global_step()
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]  # rank 0's values win
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
            av, bv = sess.run([a, b])
        assert (av == 1.0).all() and bv.tolist() == [0, 7], (av, bv)
        # session-based helpers
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())  # fresh rank-dependent values
            sess.run(hvd.broadcast_global_variables(1 % size))
            assert (sess.run(a) == 1 % size + 1.0).all()
            summed = sess.run(hvd.allreduce(tf.constant([1.0, rank]), op=hvd.Sum))
            assert summed.tolist() == [size, sum(range(size))], summed
            assert hvd.broadcast_object({"r": rank}, root_rank=0, session=sess) == {"r": 0}
            fn = hvd.broadcast_object_fn(root_rank=1 % size, session=sess)
            assert fn(("x", rank)) == ("x", 1 % size) and fn([rank] * 3) == [1 % size] * 3
            assert hvd.allgather_object(rank * 2, session=sess) == [2 * r for r in range(size)]
            sess.run(a.assign(tf.fill([2, 3], tf.constant(rank + 5.0, tf.float64))))
            sess.run(hvd.broadcast_variables([a], 0, inplace=True))
            assert (sess.run(a) == 5.0).all()


def mismatch_raises_failed_precondition(rank, size, per_rank):
    result = {}
    cases = {
        "allreduce_shape_eager": lambda: hvd.allreduce(tf.zeros([3 + rank]), name="mm.a"),
        "allreduce_shape_function": tf.function(lambda: hvd.allreduce(tf.zeros([3 + rank]), name="mm.b")),
        "allreduce_dtype": lambda: hvd.allreduce(tf.zeros([3], tf.float32 if rank == 0 else tf.float64),
                                                 op=hvd.Sum, name="mm.c"),
        "allgather_tail": lambda: hvd.allgather(tf.zeros([2, 3 + rank]), name="mm.d"),
        "broadcast_root": lambda: hvd.broadcast(tf.zeros([3]), root_rank=rank, name="mm.e"),
    }
    for case, fn in cases.items():
        try:
            fn()
            result[case] = "no error"
        except tf.errors.FailedPreconditionError:
            result[case] = "ok"
        except Exception as e:
            result[case] = "%s: %s" % (type(e).__name__, e)
        # the engine still works afterwards
        after = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after." + case)
        if after.numpy().tolist() != [size, size]:
            result[case] = "engine unusable after the mismatch"
    return result


CHECKS = [api_surface,
          allreduce_ops_and_dtypes,
          allreduce_compression,
          allreduce_indexed_slices,
          grouped_allreduce_mixed,
          allgather_and_grouped,
          broadcast_and_inplace,
          alltoall,
          reducescatter,
          join_barrier_topology_ops,
          gradients,
          broadcast_variables,
          objects,
          sync_batch_norm,
          tf1_graph_mode,
          mismatch_raises_failed_precondition]


def every_check():
    """Runs every check in CHECKS, in order; returns {check: "ok", its result, or the failure's traceback}."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    per_rank = np.stack([base(r=r).numpy() for r in range(size)])  # every rank's base(), as numpy
    return checklist.run_checks(CHECKS, rank, size, per_rank)


def sync_batch_norm_tf_keras(rank):
    import tf_keras
    assert tf.keras.layers.BatchNormalization is tf_keras.layers.BatchNormalization
    counts = [3, 5]
    start = sum(counts[:rank])
    mine = slice(start, start + counts[rank])
    gen = np.random.RandomState(5)
    x_full = (gen.randn(8, 6, 4) * 3 + 1).astype(np.float32)
    w_out = gen.randn(8, 6, 4).astype(np.float32)
    ref = tf.keras.layers.BatchNormalization(momentum=0.7, fused=False)
    sync = hvd.SyncBatchNormalization(momentum=0.7)
    results = []
    for layer, x, w in ((ref, tf.constant(x_full), w_out), (sync, tf.constant(x_full[mine]), w_out[mine])):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, training=True)
            loss = tf.reduce_sum(out * w)
        results.append((out.numpy(), tape.gradient(loss, x).numpy()))
    np.testing.assert_allclose(results[1][0], results[0][0][mine], atol=2e-5)
    np.testing.assert_allclose(results[1][1], results[0][1][mine], atol=2e-5)
    np.testing.assert_allclose(sync.moving_variance.numpy(), ref.moving_variance.numpy(), atol=2e-5)


def sync_batch_norm_on_tf_keras():
    """SyncBatchNormalization on tf-keras (run with TF_USE_LEGACY_KERAS=1); returns {check: outcome}."""
    hvd.init()
    return checklist.run_checks([sync_batch_norm_tf_keras], hvd.rank())
