# test_tensorflow_optimizer.py - DistributedGradientTape,
# PartialDistributedGradientTape and DistributedOptimizer (tf.compat.v1
# optimizers, eager and graph mode, backward_passes_per_step) on 2 real
# ranks: every reduced gradient must equal what the ranks' local gradients
# give when averaged (or summed) by hand, computed from allgathered values.
import functools

import pytest

from conftest import assert_ok

OPTIMIZER_CHECKS = r"""
import warnings
gen = np.random.RandomState(11)
X_ALL = gen.randn(size, 6, 4)
Y_ALL = gen.randn(size, 6, 3)
W0 = gen.randn(4, 3)
B0 = gen.randn(3)
E0 = gen.randn(10, 3)
IDS = [[1, 3, 3], [3, 7, 0]]  # embedding rows looked up by rank 0 / rank 1

def make_vars():
    return tf.Variable(W0, name="w"), tf.Variable(B0, name="b"), tf.Variable(E0, name="emb")

def loss_fn(w, b, emb, r):
    x = tf.constant(X_ALL[r])
    pred = tf.matmul(x, w) + b + tf.reduce_sum(tf.gather(emb, IDS[r % 2]), 0)
    return tf.reduce_mean(tf.square(pred - Y_ALL[r]))

def local_grads(r):
    w, b, emb = make_vars()
    with tf.GradientTape() as tape:
        loss = loss_fn(w, b, emb, r)
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, [w, b, emb])]

ALL = [local_grads(r) for r in range(size)]
MEAN = [np.mean([ALL[r][i] for r in range(size)], 0) for i in range(3)]
SUM = [np.sum([ALL[r][i] for r in range(size)], 0) for i in range(3)]

def adasum_pair(a, b):  # Adasum of two ranks' values (the tests run on two ranks)
    aa, bb, ab = np.vdot(a, a), np.vdot(b, b), np.vdot(a, b)
    return (1 - ab / (2 * aa) if aa else 1.0) * a + (1 - ab / (2 * bb) if bb else 1.0) * b

ADASUM = [adasum_pair(ALL[0][i], ALL[1][i]) for i in range(3)]

def dense(g):
    return tf.convert_to_tensor(g).numpy()

def tape_grads(in_function=False, **kwargs):
    w, b, emb = make_vars()
    def run():
        with tf.GradientTape() as tape:
            loss = loss_fn(w, b, emb, rank)
        tape = hvd.DistributedGradientTape(tape, **kwargs)
        return tape.gradient(loss, [w, b, emb])
    grads = tf.function(run)() if in_function else run()
    return grads

@check("tape_average_eager_and_function")
def _():
    for in_function in (False, True):
        grads = tape_grads(in_function)
        assert isinstance(grads[2], tf.IndexedSlices), type(grads[2])  # sparse stays sparse
        for g, want in zip(grads, MEAN):
            np.testing.assert_allclose(dense(g), want, rtol=1e-12, atol=1e-12)

@check("tape_options")
def _():
    for kwargs, want, tol in [(dict(op=hvd.Sum), SUM, 1e-12),
                              (dict(gradient_predivide_factor=2.0), MEAN, 1e-12),
                              (dict(sparse_as_dense=True), MEAN, 1e-12),
                              (dict(groups=2), MEAN, 1e-12),
                              (dict(op=hvd.Adasum, sparse_as_dense=True), ADASUM, 1e-10),
                              (dict(groups=2, sparse_as_dense=True), MEAN, 1e-12),
                              (dict(compression=hvd.Compression.fp16), MEAN, 2e-2),
                              (dict(compression=hvd.Compression.bf16, sparse_as_dense=True), MEAN, 5e-2)]:
        for in_function in (False, True):
            grads = tape_grads(in_function, **kwargs)
            if kwargs.get("sparse_as_dense"):
                assert not isinstance(grads[2], tf.IndexedSlices), kwargs
            for g, w in zip(grads, want):
                np.testing.assert_allclose(dense(g), w, rtol=tol, atol=tol, err_msg=str(kwargs))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = tape_grads(num_groups=1, sparse_as_dense=True)
    assert any(issubclass(c.category, DeprecationWarning) for c in caught)
    np.testing.assert_allclose(dense(grads[0]), MEAN[0])
    try:
        tape_grads(op=hvd.Adasum)  # the embedding's gradient is sparse
        raise AssertionError("Adasum accepted a sparse gradient")
    except NotImplementedError as e:
        assert "sparse_as_dense=True" in str(e)
    for bad in (dict(groups=-1), dict(groups="x"), dict(op=hvd.Sum, gradient_predivide_factor=2.0)):
        try:
            hvd.DistributedGradientTape(tf.GradientTape(), **bad)
            raise AssertionError("accepted %s" % bad)
        except ValueError:
            pass

@check("tape_groups_by_variable_and_structures")
def _():
    w, b, emb = make_vars()
    with hvd.DistributedGradientTape(tf.GradientTape(persistent=True), groups=[[w, b]],
                                     sparse_as_dense=True) as tape:
        loss = loss_fn(w, b, emb, rank)
    grads = tape.gradient(loss, {"w": w, "rest": (b, emb)})
    np.testing.assert_allclose(grads["w"].numpy(), MEAN[0])
    np.testing.assert_allclose(grads["rest"][0].numpy(), MEAN[1])
    np.testing.assert_allclose(dense(grads["rest"][1]), MEAN[2])
    # persistent: a second gradient() reduces again; single source in, single gradient out
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), MEAN[0])
    assert isinstance(tape, tf.GradientTape)
    # use_generic_names: the collectives are named grad_<i> outside any scope
    w, b, emb = make_vars()
    with tf.GradientTape() as plain:
        loss = loss_fn(w, b, emb, rank)
    grads = hvd.DistributedGradientTape(plain).gradient(loss, [w, b], use_generic_names=True)
    np.testing.assert_allclose(grads[1].numpy(), MEAN[1])
    # an unconnected source keeps a None gradient
    unused = tf.Variable(1.0)
    with tf.GradientTape() as plain:
        loss = loss_fn(w, b, emb, rank)
    grads = hvd.DistributedGradientTape(plain).gradient(loss, [w, unused])
    assert grads[1] is None
    np.testing.assert_allclose(grads[0].numpy(), MEAN[0])

@check("partial_tape_local_layers")
def _():
    tf.keras.utils.set_random_seed(3)
    shared = tf.keras.layers.Dense(3, name="shared")
    local = tf.keras.layers.Dense(2, name="local")
    x = tf.constant(X_ALL[rank], tf.float32)
    shared.build((None, 4)); local.build((None, 3))
    hvd.broadcast_variables(shared.variables + local.variables, 0)
    def grads_of(tape_factory):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(local(shared(x))))
        return tape_factory(tape).gradient(loss, shared.trainable_weights + local.trainable_weights)
    raw = [g.numpy() for g in grads_of(lambda t: t)]
    everyone = [hvd.allgather(tf.constant(g[None])).numpy() for g in raw]
    for scale in (True, False):
        got = grads_of(lambda t: hvd.PartialDistributedGradientTape(t, local_layers=[local],
                                                                    scale_local_gradients=scale))
        np.testing.assert_allclose(got[0].numpy(), everyone[0].mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1].numpy(), everyone[1].mean(0), rtol=1e-5, atol=1e-6)
        for i in (2, 3):  # local layer: this rank's own gradient (divided by size when scaling)
            np.testing.assert_allclose(got[i].numpy(), raw[i] / (size if scale else 1), rtol=1e-5, atol=1e-6)
    # get_local_and_global_gradients: the same gradients as (variable, gradient) pairs, split by locality
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(local(shared(x))))
    sources = shared.trainable_weights + local.trainable_weights
    local_pairs, global_pairs = hvd.PartialDistributedGradientTape(
        tape, local_layers=[local]).get_local_and_global_gradients(loss, sources)
    assert [v.name for v, _ in local_pairs] == [v.name for v in local.trainable_weights]
    assert [v.name for v, _ in global_pairs] == [v.name for v in shared.trainable_weights]
    for (_, g), want in zip(global_pairs + local_pairs, [everyone[0].mean(0), everyone[1].mean(0),
                                                        raw[2] / size, raw[3] / size]):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
    try:
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=["not a layer"])
        raise AssertionError("accepted a non-layer")
    except ValueError:
        pass

@check("legacy_optimizer_eager")
def _():
    for kwargs in (dict(), dict(groups=1, sparse_as_dense=True), dict(op=hvd.Sum)):
        w, b, emb = make_vars()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), **kwargs)
        assert opt.get_name() == "DistributedGradientDescentOptimizer", opt.get_name()
        gv = opt.compute_gradients(lambda: loss_fn(w, b, emb, rank), var_list=[w, b, emb])
        want = SUM if kwargs.get("op") == hvd.Sum else MEAN
        for (g, v), m in zip(gv, want):
            np.testing.assert_allclose(dense(g), m, rtol=1e-12, atol=1e-12)
        opt.apply_gradients(gv)
        np.testing.assert_allclose(w.numpy(), W0 - 0.5 * want[0], rtol=1e-12)
        np.testing.assert_allclose(emb.numpy(), E0 - 0.5 * want[2], rtol=1e-12, atol=1e-12)
    # minimize() goes through compute_gradients, so it averages too
    w, b, emb = make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9))
    opt.minimize(lambda: loss_fn(w, b, emb, rank), var_list=[w, b])
    np.testing.assert_allclose(b.numpy(), B0 - 0.5 * MEAN[1], rtol=1e-12)
    assert opt.get_slot_names() == ["momentum"] and opt.get_slot(b, "momentum") is not None
    # worker-local variable: local gradient scaled by 1/size, not reduced
    w, b, emb = make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
    opt.register_local_var(b)
    gv = opt.compute_gradients(lambda: loss_fn(w, b, emb, rank), var_list=[w, b])
    np.testing.assert_allclose(gv[0][0].numpy(), MEAN[0])
    np.testing.assert_allclose(gv[1][0].numpy(), ALL[rank][1] / size)
    for bad in (dict(backward_passes_per_step=2), dict(groups=0)):
        try:
            hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), **bad)
            raise AssertionError("accepted %s in eager mode" % bad)
        except ValueError:
            pass
    try:
        hvd.DistributedOptimizer(object())
        raise AssertionError("accepted a non-optimizer")
    except ValueError as e:
        assert "legacy TensorFlow or Keras optimizer" in str(e)

@check("legacy_optimizer_graph_mode")
def _():
    for opt_cls, kwargs in ((tf.compat.v1.train.GradientDescentOptimizer, {}),
                            (tf.compat.v1.train.GradientDescentOptimizer, dict(groups=2, sparse_as_dense=True))):
        with tf.Graph().as_default():
            w, b, emb = make_vars()
            step = tf.compat.v1.train.get_or_create_global_step()
            opt = hvd.DistributedOptimizer(opt_cls(0.5), **kwargs)
            train = opt.minimize(loss_fn(w, b, emb, rank), global_step=step)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())  # start from W0/E0
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), W0 - 0.5 * MEAN[0], rtol=1e-12)
                np.testing.assert_allclose(sess.run(emb), E0 - 0.5 * MEAN[2], rtol=1e-12, atol=1e-12)
                assert sess.run(step) == 1

@check("legacy_optimizer_backward_passes_per_step")
def _():
    # Two passes on the same batch: the update uses the sum (or mean) of the
    # two passes' gradients, averaged over ranks, applied once on pass 2.
    for opt_cls, average in ((tf.compat.v1.train.GradientDescentOptimizer, False),
                             (tf.compat.v1.train.GradientDescentOptimizer, True),
                             (lambda lr: tf.compat.v1.train.MomentumOptimizer(lr, 0.9), True)):
        with tf.Graph().as_default():
            w, b, emb = make_vars()
            step = tf.compat.v1.train.get_or_create_global_step()
            opt = hvd.DistributedOptimizer(opt_cls(0.5), backward_passes_per_step=2,
                                           average_aggregated_gradients=average, sparse_as_dense=True)
            train = opt.minimize(loss_fn(w, b, emb, rank), global_step=step)
            factor = 1.0 if average else 2.0
            with tf.compat.v1.Session() as sess:
                sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), W0)  # not applied yet
                assert sess.run(step) == 1
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), W0 - 0.5 * factor * MEAN[0], rtol=1e-12)
                np.testing.assert_allclose(sess.run(b), B0 - 0.5 * factor * MEAN[1], rtol=1e-12)
                assert sess.run(step) == 2
                sess.run(train)  # a new window starts from zero
                np.testing.assert_allclose(sess.run(w), W0 - 0.5 * factor * MEAN[0], rtol=1e-12)

@check("legacy_optimizer_adasum")
def _():
    # Each rank's Momentum step (lr 0.5: the first change is -0.5 * g), then
    # the changes combined with Adasum; with two ranks that is one pair.
    want = [start + adasum_pair(-0.5 * ALL[0][i], -0.5 * ALL[1][i]) for i, start in enumerate((W0, B0, E0))]
    w, b, emb = make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum)
    gv = opt.compute_gradients(lambda: loss_fn(w, b, emb, rank), var_list=[w, b, emb])
    for (g, _), local in zip(gv, ALL[rank]):
        np.testing.assert_allclose(dense(g), local, rtol=1e-12, atol=1e-12)  # not reduced
    opt.apply_gradients(gv)
    for v, expected in zip((w, b, emb), want):
        np.testing.assert_allclose(v.numpy(), expected, rtol=1e-10, atol=1e-12)
    assert opt.get_slot(b, "momentum") is not None
    with tf.Graph().as_default():
        w, b, emb = make_vars()
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum)
        train = opt.minimize(loss_fn(w, b, emb, rank), global_step=step)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())  # same start on every rank
            sess.run(train)
            for v, expected in zip((w, b, emb), want):
                np.testing.assert_allclose(sess.run(v), expected, rtol=1e-10, atol=1e-12)
            assert sess.run(step) == 1
    # backward_passes_per_step=2: two local Momentum steps with the same
    # gradient g (changes -0.5 g, then -0.5 * 1.9 g), combined on the second.
    want2 = [start + adasum_pair(-1.45 * ALL[0][i], -1.45 * ALL[1][i]) for i, start in enumerate((W0, B0, E0))]
    def check_window(run, read):
        run()
        for v, start, g in zip(vs, (W0, B0, E0), ALL[rank]):
            np.testing.assert_allclose(read(v), start - 0.5 * g, rtol=1e-10, atol=1e-12)  # local only
        run()
        for v, expected in zip(vs, want2):  # the optimizer holds momentum 0.9 as a float32
            np.testing.assert_allclose(read(v), expected, rtol=1e-6, atol=1e-9)
    vs = make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    gv = [(tf.constant(g), v) for g, v in zip(ALL[rank], vs)]
    check_window(lambda: opt.apply_gradients(gv), lambda v: v.numpy())
    vs = make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    gv = [(tf.constant(g), v) for g, v in zip(ALL[rank], vs)]
    check_window(tf.function(lambda: opt.apply_gradients(gv)), lambda v: v.numpy())
    with tf.Graph().as_default():
        vs = make_vars()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum,
                                       backward_passes_per_step=2)
        train = opt.apply_gradients([(tf.constant(g), v) for g, v in zip(ALL[rank], vs)])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())  # same start on every rank
            check_window(lambda: sess.run(train), sess.run)

@check("eager_aggregation_helper")
def _():
    from horovod.tensorflow.gradient_aggregation_eager import LocalGradientAggregationHelperEager  # used here only
    reduce_fn = hvd._make_allreduce_grads_fn("agg", "", "", hvd.Compression.none, True, hvd.Average, 1.0, None,
                                             process_set=hvd.global_process_set)
    for in_function in (False, True):
        helper = LocalGradientAggregationHelperEager(2, reduce_fn, True, average_aggregated_gradients=True)
        w, b, emb = make_vars()
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        def one_pass():
            with tf.GradientTape() as tape:
                loss = loss_fn(w, b, emb, rank)
            grads = helper.compute_gradients(tape.gradient(loss, [w, b]), [w, b])
            helper.apply_gradients(lambda: opt.apply_gradients(zip(grads, [w, b])), opt, None)
            return grads
        if in_function:
            one_pass = tf.function(one_pass)
        one_pass()
        np.testing.assert_allclose(w.numpy(), W0)
        grads = one_pass()
        np.testing.assert_allclose(grads[0].numpy(), MEAN[0], rtol=1e-12)
        np.testing.assert_allclose(w.numpy(), W0 - 0.5 * MEAN[0], rtol=1e-12)

@check("keras_dispatch")
def _():
    try:
        import horovod.tensorflow.keras  # noqa: F401
    except ImportError as e:
        return "skipped: horovod.tensorflow.keras not importable (%s)" % e
    plain = tf.keras.optimizers.SGD(0.1)
    opt = hvd.DistributedOptimizer(plain)
    # horovod.tensorflow.keras wraps it (Horovod keeps the class name, so
    # compare the classes, not their names)
    assert isinstance(opt, tf.keras.optimizers.SGD) and type(opt) is not type(plain), type(opt)

print(json.dumps(report))
"""


@functools.lru_cache(maxsize=None)
def _reports(tf_ranks):
    return tf_ranks.run_ok(2, OPTIMIZER_CHECKS, timeout=240)


@pytest.fixture(scope="module")
def reports(tf_ranks):
    return _reports(tf_ranks)


@pytest.mark.parametrize("check", [
    "tape_average_eager_and_function", "tape_options", "tape_groups_by_variable_and_structures",
    "partial_tape_local_layers", "legacy_optimizer_eager", "legacy_optimizer_graph_mode",
    "legacy_optimizer_backward_passes_per_step", "legacy_optimizer_adasum", "eager_aggregation_helper"])
def test_optimizer_on_two_ranks(reports, check):
    assert_ok(reports, check)


def test_keras_optimizer_dispatches_to_horovod_tensorflow_keras(reports):
    outcome = reports[0]["keras_dispatch"]
    if outcome.startswith("skipped"):
        pytest.skip(outcome)
    assert_ok(reports, "keras_dispatch")
