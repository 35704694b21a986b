# training.py - rank side of test_training.py: data-parallel training with
# DistributedTrainer (Gluon) and DistributedOptimizer (Module API) must give
# the weights that one process gets from the concatenated batch. Each rank
# also trains that one-process reference itself (no collectives), so the
# comparison needs no second job.
"""Rank programs for test_training.py."""

import mxnet as mx
import numpy as np

import horovod.mxnet as hvd

LOCAL_BATCH = 4
STEPS = 3


def _batches(size, step):
    """The global batch of `step` (the same on every rank): features and targets."""
    rng = np.random.RandomState(100 + step)
    x = rng.uniform(-1, 1, (LOCAL_BATCH * size, 5)).astype(np.float32)
    y = rng.uniform(-1, 1, (LOCAL_BATCH * size, 2)).astype(np.float32)
    return x, y


def _gluon_net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, activation="tanh", in_units=5), mx.gluon.nn.Dense(2, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    return net


def _train_gluon(net, trainer, size, rank, batch_rows):
    loss_fn = mx.gluon.loss.L2Loss()
    for step in range(STEPS):
        x, y = _batches(size, step)
        rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH) if batch_rows == LOCAL_BATCH else slice(None)
        data, label = mx.nd.array(x[rows]), mx.nd.array(y[rows])
        with mx.autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(batch_rows)
    return [p.data().asnumpy() for _, p in sorted(net.collect_params().items())]


def gluon_trainer_matches_one_process(num_groups=0, compression="none", predivide=1.0):
    """Returns the largest difference between the distributed and the one-process weights, and the spread."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(rank)  # different initial weights on each rank: broadcast_parameters must fix them
    net = _gluon_net()
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    initial = [p.data().copy() for _, p in sorted(net.collect_params().items())]
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                                     compression=getattr(hvd.Compression, compression),
                                     gradient_predivide_factor=predivide, num_groups=num_groups)
    distributed = _train_gluon(net, trainer, size, rank, LOCAL_BATCH)

    reference = _gluon_net()
    for (_, p), value in zip(sorted(reference.collect_params().items()), initial):
        p.set_data(value)
    plain = mx.gluon.Trainer(reference.collect_params(), "sgd", {"learning_rate": 0.5}, kvstore=None)
    expected = _train_gluon(reference, plain, size, rank, LOCAL_BATCH * size)
    gathered = hvd.allgather_object([w.tolist() for w in distributed])
    return {"diff": max(float(np.abs(d - e).max()) for d, e in zip(distributed, expected)),
            "moved": max(float(np.abs(d - i.asnumpy()).max()) for d, i in zip(distributed, initial)),
            "ranks_agree": all(g == gathered[0] for g in gathered)}


def _module(batch):
    data = mx.sym.Variable("data")
    net = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    net = mx.sym.Activation(net, act_type="tanh")
    net = mx.sym.FullyConnected(net, num_hidden=2, name="fc2")
    net = mx.sym.LinearRegressionOutput(net, mx.sym.Variable("label"), name="out")
    mod = mx.mod.Module(net, data_names=["data"], label_names=["label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch, 5))], label_shapes=[("label", (batch, 2))])
    return mod


def _train_module(mod, optimizer, size, rank, batch_rows, arg_params):
    mod.init_params(arg_params=arg_params, aux_params={}, allow_missing=False, force_init=True)
    mod.init_optimizer(optimizer=optimizer, kvstore=None)
    for step in range(STEPS):
        x, y = _batches(size, step)
        rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH) if batch_rows == LOCAL_BATCH else slice(None)
        mod.forward_backward(mx.io.DataBatch([mx.nd.array(x[rows])], [mx.nd.array(y[rows])]))
        mod.update()
    args, _ = mod.get_params()
    return {k: v.asnumpy() for k, v in sorted(args.items())}


def module_optimizer_matches_one_process(num_groups=0):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(rank)
    mod = _module(LOCAL_BATCH)
    mod.init_params(mx.init.Xavier())
    args, _ = mod.get_params()
    hvd.broadcast_parameters(args, root_rank=0)
    initial = {k: v.copy() for k, v in args.items()}
    # LinearRegressionOutput's gradient is per sample: rescale by the batch the step sees.
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / LOCAL_BATCH),
                                   num_groups=num_groups)
    distributed = _train_module(mod, opt, size, rank, LOCAL_BATCH, initial)

    reference = _module(LOCAL_BATCH * size)
    plain = mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / (LOCAL_BATCH * size))
    expected = _train_module(reference, plain, size, rank, LOCAL_BATCH * size, initial)
    return {"diff": max(float(np.abs(distributed[k] - expected[k]).max()) for k in expected),
            "moved": max(float(np.abs(distributed[k] - initial[k].asnumpy()).max()) for k in expected)}
