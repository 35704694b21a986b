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
BF16 = np.dtype(mx.ndarray.ndarray._DTYPE_MX_TO_NP[12])


@mx.optimizer.register
class PlainSGD(mx.optimizer.Optimizer):
    """SGD in NDArray arithmetic: MXNet's own update operators refuse bfloat16 weights."""

    def create_state(self, index, weight):
        return None

    def update(self, index, weight, grad, state):
        weight[:] = weight - grad * (self._get_lr(index) * self.rescale_grad)


def _as_float32(ndarray):
    return mx.nd.amp_cast(ndarray, dtype="float32") if np.dtype(ndarray.dtype) == BF16 else ndarray


def _batches(size, step):
    """The global batch of `step` (the same on every rank): features and targets."""
    rng = np.random.RandomState(100 + step)
    x = rng.uniform(-1, 1, (LOCAL_BATCH * size, 5)).astype(np.float32)
    y = rng.uniform(-1, 1, (LOCAL_BATCH * size, 2)).astype(np.float32)
    return x, y


class ElementwiseDense(mx.gluon.HybridBlock):
    """A dense layer of elementwise products and a sum.

    MXNet runs bfloat16 FullyConnected and dot only through oneDNN kernels
    that need AVX-512 ("could not create a primitive descriptor iterator"
    on an AVX2 CPU); its elementwise operators take bfloat16 on any x86 CPU.
    """

    def __init__(self, units, in_units, activation=None, **kwargs):
        super().__init__(**kwargs)
        assert activation in (None, "tanh"), activation
        self._tanh = activation == "tanh"
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(units, in_units))
            self.bias = self.params.get("bias", shape=(units,), init="zeros")

    def hybrid_forward(self, F, x, weight, bias):
        products = F.broadcast_mul(F.expand_dims(x, axis=1), F.expand_dims(weight, axis=0))
        out = F.broadcast_add(F.sum(products, axis=2), F.expand_dims(bias, axis=0))
        return F.tanh(out) if self._tanh else out


def _gluon_net(dtype):
    dense = ElementwiseDense if dtype == "bfloat16" else mx.gluon.nn.Dense
    net = mx.gluon.nn.HybridSequential()
    net.add(dense(8, activation="tanh", in_units=5), dense(2, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    if dtype == "bfloat16":
        net.cast(BF16)
    return net


def _train_gluon(net, trainer, size, rank, batch_rows, dtype):
    loss_fn = mx.gluon.loss.L2Loss()
    for step in range(STEPS):
        x, y = _batches(size, step)
        rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH) if batch_rows == LOCAL_BATCH else slice(None)
        data, label = mx.nd.array(x[rows]), mx.nd.array(y[rows])
        if dtype == "bfloat16":
            data, label = mx.nd.amp_cast(data, dtype=BF16), mx.nd.amp_cast(label, dtype=BF16)
        with mx.autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(batch_rows)
    return [_as_float32(p.data()).asnumpy() for _, p in sorted(net.collect_params().items())]


def gluon_trainer_matches_one_process(num_groups=0, compression="none", predivide=1.0, dtype="float32"):
    """Returns the largest difference between the distributed and the one-process weights, and the spread.

    With dtype="bfloat16" the parameters, gradients and data are bfloat16,
    and the optimizer is PlainSGD (MXNet's sgd_update has no bfloat16).
    """
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(rank)  # different initial weights on each rank: broadcast_parameters must fix them
    net = _gluon_net(dtype)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    initial = [p.data().copy() for _, p in sorted(net.collect_params().items())]
    optimizer = "plainsgd" if dtype == "bfloat16" else "sgd"
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer, {"learning_rate": 0.5},
                                     compression=getattr(hvd.Compression, compression),
                                     gradient_predivide_factor=predivide, num_groups=num_groups)
    distributed = _train_gluon(net, trainer, size, rank, LOCAL_BATCH, dtype)
    grad_dtypes = sorted({"bfloat16" if np.dtype(p.grad().dtype) == BF16 else np.dtype(p.grad().dtype).name
                          for p in net.collect_params().values()})

    reference = _gluon_net(dtype)
    for (_, p), value in zip(sorted(reference.collect_params().items()), initial):
        p.set_data(value)
    plain = mx.gluon.Trainer(reference.collect_params(), optimizer, {"learning_rate": 0.5}, kvstore=None)
    expected = _train_gluon(reference, plain, size, rank, LOCAL_BATCH * size, dtype)
    gathered = hvd.allgather_object([w.tolist() for w in distributed])
    return {"diff": max(float(np.abs(d - e).max()) for d, e in zip(distributed, expected)),
            "moved": max(float(np.abs(d - _as_float32(i).asnumpy()).max()) for d, i in zip(distributed, initial)),
            "ranks_agree": all(g == gathered[0] for g in gathered), "grad_dtypes": grad_dtypes}


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
