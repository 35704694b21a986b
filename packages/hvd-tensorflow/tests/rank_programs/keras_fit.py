# keras_fit.py - rank side of test_keras.py: model.fit with
# horovod.tensorflow.keras's DistributedOptimizer and every callback, next to
# the 1-process reference each rank trains itself; load_model, sparse
# gradients, aggregation, PartialDistributedOptimizer and the value-level
# helpers. One program checks all of it: a TF process start costs seconds.
# TF_USE_LEGACY_KERAS in the rank's environment picks tf-keras.
"""Rank programs for test_keras.py."""

import os
import warnings

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd
from horovod._keras import get_value
from rank_programs import tensorflow_threads

tensorflow_threads.limit()


def fit_and_compare_with_single_process(flavour, checkpoint_dir):
    """Trains on `flavour` ("keras3" or "tf_keras"), checkpoints under `checkpoint_dir`; returns {check: result}."""
    keras = tf.keras  # Keras 3 or, with TF_USE_LEGACY_KERAS=1, tf-keras
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    PER, STEPS, EPOCHS, WARMUP = 4, 6, 3, 2
    LR = 0.05 * size
    out = {"keras": keras.__name__}

    def model_mlp(seed):
        keras.utils.set_random_seed(seed)
        inp = keras.Input((5,))
        return keras.Model(inp, keras.layers.Dense(2)(keras.layers.Dense(8, activation="tanh")(inp)))

    def model_embedding(seed):
        keras.utils.set_random_seed(seed)
        inp = keras.Input((3,), dtype="int32")
        h = keras.layers.Flatten()(keras.layers.Embedding(20, 4)(inp))
        return keras.Model(inp, keras.layers.Dense(2)(h))

    def flat(model):
        return np.concatenate([np.ravel(w) for w in model.get_weights()]).astype(np.float64)

    rng = np.random.RandomState(7)
    X = rng.rand(STEPS * size * PER, 5).astype("float32")
    XI = rng.randint(0, 20, size=(STEPS * size * PER, 3)).astype("int32")
    Y = rng.rand(STEPS * size * PER, 2).astype("float32")
    XV = np.random.RandomState(100 + rank).rand(8, 5).astype("float32")   # each rank validates on its own data
    YV = np.random.RandomState(200 + rank).rand(8, 2).astype("float32")

    def shard(a):
        # this rank's rows of every global batch, in step order
        return np.concatenate([a[(s * size + rank) * PER:(s * size + rank + 1) * PER] for s in range(STEPS)])

    class Probe(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.lrs, self.moms, self.logs = [], [], []

        def on_train_batch_begin(self, batch, logs=None):
            opt = self.model.optimizer
            self.lrs.append(get_value(opt.learning_rate))
            if hasattr(getattr(opt, "momentum", None), "assign"):
                self.moms.append(get_value(opt.momentum))

        def on_epoch_end(self, epoch, logs=None):  # keep the losses Keras reports
            self.logs.append({k: float(v) for k, v in logs.items() if k in ("loss", "val_loss")})

    def sgd(lr, momentum):
        if flavour == "tf_keras":  # the legacy optimizer: momentum is a variable there
            return keras.optimizers.legacy.SGD(lr, momentum=momentum)
        return keras.optimizers.SGD(lr, momentum=momentum)

    def lr_callbacks():
        return [hvd.callbacks.LearningRateWarmupCallback(initial_lr=LR, warmup_epochs=WARMUP, verbose=0),
                hvd.callbacks.LearningRateScheduleCallback(initial_lr=LR, multiplier=0.5, start_epoch=WARMUP)]

    base = checkpoint_dir
    ext = ".keras" if flavour == "keras3" else ".h5"
    ckpt = os.path.join(base, "rank%d" % rank, "best" + ext)
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)

    # 1. MLP, SGD with momentum, every callback; replicas start from different
    #    weights (seed + rank): the broadcast callback makes them rank 0's.
    model = model_mlp(100 + rank)
    opt = hvd.DistributedOptimizer(sgd(LR, 0.9))
    out["wrapped"] = [type(opt).__name__, isinstance(opt, type(sgd(LR, 0.9))), opt.get_config()["name"]]
    model.compile(optimizer=opt, loss="mse")
    raw, probe = Probe(), Probe()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(shard(X), shard(Y), batch_size=PER, epochs=EPOCHS, shuffle=False, verbose=0,
                  validation_data=(XV, YV),
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                             hvd.callbacks.MetricAverageCallback()] + lr_callbacks() +
                            [probe, hvd.callbacks.BestModelCheckpoint(filepath=ckpt, monitor="val_loss")])
    out["momentum_warning"] = any("momentum correction skipped" in str(w.message) for w in caught)
    ref = model_mlp(100)
    ref_probe = Probe()
    ref.compile(optimizer=sgd(LR, 0.9), loss="mse")
    ref.fit(X, Y, batch_size=PER * size, epochs=EPOCHS, shuffle=False, verbose=0,
            callbacks=lr_callbacks() + [ref_probe])
    out["mlp_vs_ref"] = float(np.abs(flat(model) - flat(ref)).max())
    out["mlp_weights"] = flat(model).tolist()
    out["raw_logs"], out["avg_logs"] = raw.logs, probe.logs
    out["lrs"], out["ref_lrs"], out["moms"] = probe.lrs, ref_probe.lrs, probe.moms
    out["final_momentum"] = get_value(opt.momentum)

    # 2. load_model: every rank loads rank 0's best checkpoint (a collective
    #    first, so rank 0 has written it) and trains on; the optimizer comes
    #    back wrapped, with its state.
    hvd.allreduce(0.0, name="after_fit")
    out["ckpt_exists"] = os.path.exists(ckpt)
    loaded = hvd.load_model(os.path.join(base, "rank0", "best" + ext))
    out["loaded_optimizer"] = [type(loaded.optimizer).__name__,
                               bool(getattr(type(loaded.optimizer), "_hvd_distributed", False)),
                               int(get_value(loaded.optimizer.iterations))]
    loaded.fit(shard(X), shard(Y), batch_size=PER, epochs=1, shuffle=False, verbose=0)
    out["loaded_weights"] = flat(loaded).tolist()

    # 3. Embedding (sparse IndexedSlices gradients), Adam, groups and
    #    gradient_predivide_factor; XLA-compiled train step on Keras 3.
    model = model_embedding(300)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), groups=2,
                                                     gradient_predivide_factor=2.0),
                  loss="mse", **({"jit_compile": True} if flavour == "keras3" else {}))
    model.fit(shard(XI), shard(Y), batch_size=PER, epochs=2, shuffle=False, verbose=0)
    ref = model_embedding(300)
    ref.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    ref.fit(XI, Y, batch_size=PER * size, epochs=2, shuffle=False, verbose=0)
    out["embedding_vs_ref"] = float(np.abs(flat(model) - flat(ref)).max())

    # 4. backward_passes_per_step=2 with averaging: two local batches per
    #    update equal one reference batch twice as large.
    model = model_mlp(400)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                   average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(X), shard(Y), batch_size=PER, epochs=1, shuffle=False, verbose=0)
    ref = model_mlp(400)
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ref.fit(X, Y, batch_size=2 * PER * size, epochs=1, shuffle=False, verbose=0)
    out["bpps_vs_ref"] = float(np.abs(flat(model) - flat(ref)).max())
    out["bpps_iterations"] = int(get_value(opt.iterations))
    # Horovod's name for the aggregation state: passes so far in the cycle
    out["bpps_agg_counter"] = int(get_value(opt._agg_helper.counter))
    out["no_agg_helper"] = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))._agg_helper is None

    # 5. PartialDistributedOptimizer: the local layer's weights are trained on
    #    this rank's data only (through horovod.keras on Keras 3).
    hk = hvd
    if flavour == "keras3":
        import horovod.keras as hk
    model = model_mlp(500)
    local = model.layers[-1]
    model.compile(optimizer=hk.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local]), loss="mse")
    model.fit(shard(X), shard(Y), batch_size=PER, epochs=1, shuffle=False, verbose=0)
    out["partial_global"] = np.ravel(model.layers[1].get_weights()[0]).tolist()
    out["partial_local"] = np.ravel(local.get_weights()[0]).tolist()

    # 6. value-level helpers and argument checks
    out["allreduce"] = np.asarray(hvd.allreduce(float(rank))).tolist()
    out["allgather"] = np.asarray(hvd.allgather([[rank, rank]])).tolist()
    out["broadcast"] = np.asarray(hvd.broadcast(rank + 5, root_rank=1)).tolist()
    out["reducescatter"] = np.asarray(hvd.reducescatter(np.arange(4.0) * (rank + 1))).tolist()
    # a custom eager loop: plain gradients handed to apply_gradients are averaged
    v = keras.Variable([1.0, 2.0]) if flavour == "keras3" else tf.Variable([1.0, 2.0])
    eager_opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0))
    eager_opt.apply_gradients([(tf.constant([float(rank), 2.0 + rank]), v)])
    out["eager_apply"] = np.asarray(v).tolist()
    # BroadcastGlobalVariablesCallback(local_variables=...): those stay this
    # rank's own (Keras 3 passes its variable wrappers), the rest become rank 0's
    model = model_mlp(600 + rank)
    local_before = np.ravel(model.layers[1].get_weights()[0]).tolist()
    model.compile(optimizer=sgd(0.0, 0.0), loss="mse")
    model.fit(shard(X)[:PER], shard(Y)[:PER], batch_size=PER, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=model.layers[1].variables)])
    out["bcast_local_kept"] = np.ravel(model.layers[1].get_weights()[0]).tolist() == local_before
    out["bcast_global"] = np.ravel(model.layers[2].get_weights()[0]).tolist()
    out["bcast_local"] = local_before
    if flavour == "tf_keras":
        # legacy OptimizerV2: _compute_gradients() (minimize's first half) returns
        # reduced gradients, and applying those very tensors does not reduce
        # them again (op=Sum makes a second reduction visible: 2x)
        w = tf.Variable([1.0, 1.0])
        sopt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(1.0), op=hvd.Sum)
        def loss_fn():
            return tf.reduce_sum(w * (rank + 1.0))
        pairs = sopt._compute_gradients(loss_fn, var_list=[w])
        out["legacy_computed"] = np.asarray(pairs[0][0]).tolist()
        sopt.apply_gradients(pairs)
        sopt.minimize(loss_fn, var_list=[w])
        out["legacy_applied"] = np.asarray(w).tolist()
        # tf-keras' new-style optimizer: the same through _compute_gradients()
        # (Horovod's tests call it) and compute_gradients() (minimize's first half)
        w = tf.Variable([1.0, 1.0])
        nopt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Sum)
        pairs = nopt._compute_gradients(lambda: tf.reduce_sum(w * (rank + 1.0)), [w], tape=tf.GradientTape())
        out["new_computed"] = np.asarray(pairs[0][0]).tolist()
        nopt.apply_gradients(pairs)
        nopt.minimize(lambda: tf.reduce_sum(w * (rank + 1.0)), var_list=[w], tape=tf.GradientTape())
        out["new_applied"] = np.asarray(w).tolist()
        # horovod.keras binds `import keras` (Keras 3), yet takes tf-keras layers too
        import horovod.keras as hk
        layer = model.layers[1]
        popt = hk.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[layer])
        out["partial_tf_keras_layers"] = sorted(id(v) for v in popt._hvd.local_vars.values()) == \
            sorted(id(v) for v in layer.trainable_weights)
    errors = []
    for kwargs in ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, {"groups": -1},
                   {"backward_passes_per_step": 0}):
        try:
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)
        except ValueError:
            errors.append(True)
    out["errors"] = errors
    return out
