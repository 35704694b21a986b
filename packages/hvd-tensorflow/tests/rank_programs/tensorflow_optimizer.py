# tensorflow_optimizer.py - rank side of test_tensorflow_optimizer.py:
# DistributedGradientTape, PartialDistributedGradientTape and
# DistributedOptimizer (tf.compat.v1 optimizers, eager and graph mode,
# backward_passes_per_step, Adasum) against the gradients every rank computes
# locally for every rank and averages (or sums) by hand. One program runs
# every check (checklist.run_checks), so TensorFlow starts once per rank.
"""Rank programs for test_tensorflow_optimizer.py."""

import warnings

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from rank_programs import checklist, tensorflow_threads

tensorflow_threads.limit()

IDS = [[1, 3, 3], [3, 7, 0]]  # embedding rows looked up by rank 0 / rank 1


def adasum_pair(a, b):
    """Adasum of two ranks' values (the tests run on two ranks)."""
    aa, bb, ab = np.vdot(a, a), np.vdot(b, b), np.vdot(a, b)
    return (1 - ab / (2 * aa) if aa else 1.0) * a + (1 - ab / (2 * bb) if bb else 1.0) * b


def dense(g):
    """A gradient (tensor or IndexedSlices) as a dense numpy array."""
    return tf.convert_to_tensor(g).numpy()


class Problem:
    """A small model with an embedding, each rank's data, and every rank's local gradients computed here.

    Every rank draws the same data from one seed, so each can compute what
    the reduced gradients must be: `mean`, `sum` and `adasum` of `local`
    (local[r] holds rank r's gradients of w, b and emb).
    """

    def __init__(self, rank, size):
        self.rank, self.size = rank, size
        gen = np.random.RandomState(11)
        self.x_all = gen.randn(size, 6, 4)
        self.y_all = gen.randn(size, 6, 3)
        self.w0 = gen.randn(4, 3)
        self.b0 = gen.randn(3)
        self.e0 = gen.randn(10, 3)
        self.local = [self._local_grads(r) for r in range(size)]
        self.mean = [np.mean([self.local[r][i] for r in range(size)], 0) for i in range(3)]
        self.sum = [np.sum([self.local[r][i] for r in range(size)], 0) for i in range(3)]
        self.adasum = [adasum_pair(self.local[0][i], self.local[1][i]) for i in range(3)]

    def make_vars(self):
        return tf.Variable(self.w0, name="w"), tf.Variable(self.b0, name="b"), tf.Variable(self.e0, name="emb")

    def loss_fn(self, w, b, emb, r):
        x = tf.constant(self.x_all[r])
        pred = tf.matmul(x, w) + b + tf.reduce_sum(tf.gather(emb, IDS[r % 2]), 0)
        return tf.reduce_mean(tf.square(pred - self.y_all[r]))

    def _local_grads(self, r):
        w, b, emb = self.make_vars()
        with tf.GradientTape() as tape:
            loss = self.loss_fn(w, b, emb, r)
        return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, [w, b, emb])]

    def tape_grads(self, in_function=False, **kwargs):
        """This rank's gradients through DistributedGradientTape(**kwargs), eagerly or in a tf.function."""
        w, b, emb = self.make_vars()

        def run():
            with tf.GradientTape() as tape:
                loss = self.loss_fn(w, b, emb, self.rank)
            tape = hvd.DistributedGradientTape(tape, **kwargs)
            return tape.gradient(loss, [w, b, emb])
        grads = tf.function(run)() if in_function else run()
        return grads


def tape_average_eager_and_function(p):
    for in_function in (False, True):
        grads = p.tape_grads(in_function)
        assert isinstance(grads[2], tf.IndexedSlices), type(grads[2])  # sparse stays sparse
        for g, want in zip(grads, p.mean):
            np.testing.assert_allclose(dense(g), want, rtol=1e-12, atol=1e-12)


def tape_options(p):
    for kwargs, want, tol in [(dict(op=hvd.Sum), p.sum, 1e-12),
                              (dict(gradient_predivide_factor=2.0), p.mean, 1e-12),
                              (dict(sparse_as_dense=True), p.mean, 1e-12),
                              (dict(groups=2), p.mean, 1e-12),
                              (dict(op=hvd.Adasum, sparse_as_dense=True), p.adasum, 1e-10),
                              (dict(groups=2, sparse_as_dense=True), p.mean, 1e-12),
                              (dict(compression=hvd.Compression.fp16), p.mean, 2e-2),
                              (dict(compression=hvd.Compression.bf16, sparse_as_dense=True), p.mean, 5e-2)]:
        for in_function in (False, True):
            grads = p.tape_grads(in_function, **kwargs)
            if kwargs.get("sparse_as_dense"):
                assert not isinstance(grads[2], tf.IndexedSlices), kwargs
            for g, w in zip(grads, want):
                np.testing.assert_allclose(dense(g), w, rtol=tol, atol=tol, err_msg=str(kwargs))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = p.tape_grads(num_groups=1, sparse_as_dense=True)
    assert any(issubclass(c.category, DeprecationWarning) for c in caught)
    np.testing.assert_allclose(dense(grads[0]), p.mean[0])
    try:
        p.tape_grads(op=hvd.Adasum)  # the embedding's gradient is sparse
        raise AssertionError("Adasum accepted a sparse gradient")
    except NotImplementedError as e:
        assert "sparse_as_dense=True" in str(e)
    for bad in (dict(groups=-1), dict(groups="x"), dict(op=hvd.Sum, gradient_predivide_factor=2.0)):
        try:
            hvd.DistributedGradientTape(tf.GradientTape(), **bad)
            raise AssertionError("accepted %s" % bad)
        except ValueError:
            pass


def tape_groups_by_variable_and_structures(p):
    w, b, emb = p.make_vars()
    with hvd.DistributedGradientTape(tf.GradientTape(persistent=True), groups=[[w, b]],
                                     sparse_as_dense=True) as tape:
        loss = p.loss_fn(w, b, emb, p.rank)
    grads = tape.gradient(loss, {"w": w, "rest": (b, emb)})
    np.testing.assert_allclose(grads["w"].numpy(), p.mean[0])
    np.testing.assert_allclose(grads["rest"][0].numpy(), p.mean[1])
    np.testing.assert_allclose(dense(grads["rest"][1]), p.mean[2])
    # persistent: a second gradient() reduces again; single source in, single gradient out
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), p.mean[0])
    assert isinstance(tape, tf.GradientTape)
    # use_generic_names: the collectives are named grad_<i> outside any scope
    w, b, emb = p.make_vars()
    with tf.GradientTape() as plain:
        loss = p.loss_fn(w, b, emb, p.rank)
    grads = hvd.DistributedGradientTape(plain).gradient(loss, [w, b], use_generic_names=True)
    np.testing.assert_allclose(grads[1].numpy(), p.mean[1])
    # an unconnected source keeps a None gradient
    unused = tf.Variable(1.0)
    with tf.GradientTape() as plain:
        loss = p.loss_fn(w, b, emb, p.rank)
    grads = hvd.DistributedGradientTape(plain).gradient(loss, [w, unused])
    assert grads[1] is None
    np.testing.assert_allclose(grads[0].numpy(), p.mean[0])


def partial_tape_local_layers(p):
    tf.keras.utils.set_random_seed(3)
    shared = tf.keras.layers.Dense(3, name="shared")
    local = tf.keras.layers.Dense(2, name="local")
    x = tf.constant(p.x_all[p.rank], tf.float32)
    shared.build((None, 4))
    local.build((None, 3))
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
            np.testing.assert_allclose(got[i].numpy(), raw[i] / (p.size if scale else 1), rtol=1e-5, atol=1e-6)
    # get_local_and_global_gradients: the same gradients as (variable, gradient) pairs, split by locality
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(local(shared(x))))
    sources = shared.trainable_weights + local.trainable_weights
    local_pairs, global_pairs = hvd.PartialDistributedGradientTape(
        tape, local_layers=[local]).get_local_and_global_gradients(loss, sources)
    assert [v.name for v, _ in local_pairs] == [v.name for v in local.trainable_weights]
    assert [v.name for v, _ in global_pairs] == [v.name for v in shared.trainable_weights]
    for (_, g), want in zip(global_pairs + local_pairs, [everyone[0].mean(0), everyone[1].mean(0),
                                                        raw[2] / p.size, raw[3] / p.size]):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
    try:
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=["not a layer"])
        raise AssertionError("accepted a non-layer")
    except ValueError:
        pass


def legacy_optimizer_eager(p):
    for kwargs in (dict(), dict(groups=1, sparse_as_dense=True), dict(op=hvd.Sum)):
        w, b, emb = p.make_vars()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), **kwargs)
        assert opt.get_name() == "DistributedGradientDescentOptimizer", opt.get_name()
        gv = opt.compute_gradients(lambda: p.loss_fn(w, b, emb, p.rank), var_list=[w, b, emb])
        want = p.sum if kwargs.get("op") == hvd.Sum else p.mean
        for (g, v), m in zip(gv, want):
            np.testing.assert_allclose(dense(g), m, rtol=1e-12, atol=1e-12)
        opt.apply_gradients(gv)
        np.testing.assert_allclose(w.numpy(), p.w0 - 0.5 * want[0], rtol=1e-12)
        np.testing.assert_allclose(emb.numpy(), p.e0 - 0.5 * want[2], rtol=1e-12, atol=1e-12)
    # minimize() goes through compute_gradients, so it averages too
    w, b, emb = p.make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9))
    opt.minimize(lambda: p.loss_fn(w, b, emb, p.rank), var_list=[w, b])
    np.testing.assert_allclose(b.numpy(), p.b0 - 0.5 * p.mean[1], rtol=1e-12)
    assert opt.get_slot_names() == ["momentum"] and opt.get_slot(b, "momentum") is not None
    # worker-local variable: local gradient scaled by 1/size, not reduced
    w, b, emb = p.make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
    opt.register_local_var(b)
    gv = opt.compute_gradients(lambda: p.loss_fn(w, b, emb, p.rank), var_list=[w, b])
    np.testing.assert_allclose(gv[0][0].numpy(), p.mean[0])
    np.testing.assert_allclose(gv[1][0].numpy(), p.local[p.rank][1] / p.size)
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


def legacy_optimizer_graph_mode(p):
    for opt_cls, kwargs in ((tf.compat.v1.train.GradientDescentOptimizer, {}),
                            (tf.compat.v1.train.GradientDescentOptimizer, dict(groups=2, sparse_as_dense=True))):
        with tf.Graph().as_default():
            w, b, emb = p.make_vars()
            step = tf.compat.v1.train.get_or_create_global_step()
            opt = hvd.DistributedOptimizer(opt_cls(0.5), **kwargs)
            train = opt.minimize(p.loss_fn(w, b, emb, p.rank), global_step=step)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())  # start from w0/e0
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), p.w0 - 0.5 * p.mean[0], rtol=1e-12)
                np.testing.assert_allclose(sess.run(emb), p.e0 - 0.5 * p.mean[2], rtol=1e-12, atol=1e-12)
                assert sess.run(step) == 1


def legacy_optimizer_backward_passes_per_step(p):
    # Two passes on the same batch: the update uses the sum (or mean) of the
    # two passes' gradients, averaged over ranks, applied once on pass 2.
    for opt_cls, average in ((tf.compat.v1.train.GradientDescentOptimizer, False),
                             (tf.compat.v1.train.GradientDescentOptimizer, True),
                             (lambda lr: tf.compat.v1.train.MomentumOptimizer(lr, 0.9), True)):
        with tf.Graph().as_default():
            w, b, emb = p.make_vars()
            step = tf.compat.v1.train.get_or_create_global_step()
            opt = hvd.DistributedOptimizer(opt_cls(0.5), backward_passes_per_step=2,
                                           average_aggregated_gradients=average, sparse_as_dense=True)
            train = opt.minimize(p.loss_fn(w, b, emb, p.rank), global_step=step)
            factor = 1.0 if average else 2.0
            with tf.compat.v1.Session() as sess:
                sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), p.w0)  # not applied yet
                assert sess.run(step) == 1
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), p.w0 - 0.5 * factor * p.mean[0], rtol=1e-12)
                np.testing.assert_allclose(sess.run(b), p.b0 - 0.5 * factor * p.mean[1], rtol=1e-12)
                assert sess.run(step) == 2
                sess.run(train)  # a new window starts from zero
                np.testing.assert_allclose(sess.run(w), p.w0 - 0.5 * factor * p.mean[0], rtol=1e-12)


def legacy_optimizer_adasum(p):
    # Each rank's Momentum step (lr 0.5: the first change is -0.5 * g), then
    # the changes combined with Adasum; with two ranks that is one pair.
    want = [start + adasum_pair(-0.5 * p.local[0][i], -0.5 * p.local[1][i])
            for i, start in enumerate((p.w0, p.b0, p.e0))]
    w, b, emb = p.make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum)
    gv = opt.compute_gradients(lambda: p.loss_fn(w, b, emb, p.rank), var_list=[w, b, emb])
    for (g, _), local in zip(gv, p.local[p.rank]):
        np.testing.assert_allclose(dense(g), local, rtol=1e-12, atol=1e-12)  # not reduced
    opt.apply_gradients(gv)
    for v, expected in zip((w, b, emb), want):
        np.testing.assert_allclose(v.numpy(), expected, rtol=1e-10, atol=1e-12)
    assert opt.get_slot(b, "momentum") is not None
    with tf.Graph().as_default():
        w, b, emb = p.make_vars()
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum)
        train = opt.minimize(p.loss_fn(w, b, emb, p.rank), global_step=step)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())  # same start on every rank
            sess.run(train)
            for v, expected in zip((w, b, emb), want):
                np.testing.assert_allclose(sess.run(v), expected, rtol=1e-10, atol=1e-12)
            assert sess.run(step) == 1
    # backward_passes_per_step=2: two local Momentum steps with the same
    # gradient g (changes -0.5 g, then -0.5 * 1.9 g), combined on the second.
    want2 = [start + adasum_pair(-1.45 * p.local[0][i], -1.45 * p.local[1][i])
             for i, start in enumerate((p.w0, p.b0, p.e0))]
    def check_window(run, read):
        run()
        for v, start, g in zip(vs, (p.w0, p.b0, p.e0), p.local[p.rank]):
            np.testing.assert_allclose(read(v), start - 0.5 * g, rtol=1e-10, atol=1e-12)  # local only
        run()
        for v, expected in zip(vs, want2):  # the optimizer holds momentum 0.9 as a float32
            np.testing.assert_allclose(read(v), expected, rtol=1e-6, atol=1e-9)
    vs = p.make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    gv = [(tf.constant(g), v) for g, v in zip(p.local[p.rank], vs)]
    check_window(lambda: opt.apply_gradients(gv), lambda v: v.numpy())
    vs = p.make_vars()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    gv = [(tf.constant(g), v) for g, v in zip(p.local[p.rank], vs)]
    check_window(tf.function(lambda: opt.apply_gradients(gv)), lambda v: v.numpy())
    with tf.Graph().as_default():
        vs = p.make_vars()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), op=hvd.Adasum,
                                       backward_passes_per_step=2)
        train = opt.apply_gradients([(tf.constant(g), v) for g, v in zip(p.local[p.rank], vs)])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())  # same start on every rank
            check_window(lambda: sess.run(train), sess.run)


def eager_aggregation_helper(p):
    from horovod.tensorflow.gradient_aggregation_eager import LocalGradientAggregationHelperEager  # used here only
    reduce_fn = hvd._make_allreduce_grads_fn("agg", "", "", hvd.Compression.none, True, hvd.Average, 1.0, None,
                                             process_set=hvd.global_process_set)
    for in_function in (False, True):
        helper = LocalGradientAggregationHelperEager(2, reduce_fn, True, average_aggregated_gradients=True)
        w, b, emb = p.make_vars()
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        def one_pass():
            with tf.GradientTape() as tape:
                loss = p.loss_fn(w, b, emb, p.rank)
            grads = helper.compute_gradients(tape.gradient(loss, [w, b]), [w, b])
            helper.apply_gradients(lambda: opt.apply_gradients(zip(grads, [w, b])), opt, None)
            return grads
        if in_function:
            one_pass = tf.function(one_pass)
        one_pass()
        np.testing.assert_allclose(w.numpy(), p.w0)
        grads = one_pass()
        np.testing.assert_allclose(grads[0].numpy(), p.mean[0], rtol=1e-12)
        np.testing.assert_allclose(w.numpy(), p.w0 - 0.5 * p.mean[0], rtol=1e-12)


def keras_dispatch(p):
    try:
        import horovod.tensorflow.keras  # noqa: F401
    except ImportError as e:
        return "skipped: horovod.tensorflow.keras not importable (%s)" % e
    plain = tf.keras.optimizers.SGD(0.1)
    opt = hvd.DistributedOptimizer(plain)
    # horovod.tensorflow.keras wraps it (Horovod keeps the class name, so
    # compare the classes, not their names)
    assert isinstance(opt, tf.keras.optimizers.SGD) and type(opt) is not type(plain), type(opt)


CHECKS = [tape_average_eager_and_function,
          tape_options,
          tape_groups_by_variable_and_structures,
          partial_tape_local_layers,
          legacy_optimizer_eager,
          legacy_optimizer_graph_mode,
          legacy_optimizer_backward_passes_per_step,
          legacy_optimizer_adasum,
          eager_aggregation_helper,
          keras_dispatch]


def every_check():
    """Runs every check in CHECKS, in order; returns {check: "ok", a skip note, or the failure's traceback}."""
    hvd.init()
    return checklist.run_checks(CHECKS, Problem(hvd.rank(), hvd.size()))
