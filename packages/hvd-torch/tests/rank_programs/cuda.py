# cuda.py - rank side of test_cuda.py: every collective and dtype on CUDA
# tensors against the CPU engine on the same random data, DistributedOptimizer
# training on the GPU against the same training on the CPU, and a rank killed
# while its peer waits inside NCCL.
#
# The first two also run with device="cpu" (test_collectives.py does so at
# every CI run): no GPU is involved then, but the programs themselves keep
# working between the GPU sessions that run them for real.
"""Rank programs for test_cuda.py."""

import os
import signal
import tempfile
import threading
import time
import traceback

import torch

import horovod.torch as hvd

# Ranks share the machine's cores: intra-op threads would only contend.
torch.set_num_threads(1)

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _use_device(device):
    """The torch.device this rank computes on: its own GPU for "cuda" (local rank modulo the GPUs)."""
    if device == "cpu":
        return torch.device("cpu")
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def every_collective_matches_the_cpu_engine(device="cuda", expect_transport=None):
    """Runs each collective on `device` and on the CPU; returns {check: None or what differed}.

    With `expect_transport`, rank 0 also checks that the timeline names it
    as the transport of an allreduce on `device`.
    """
    size_env = int(os.environ["HOROVOD_SIZE"])
    last = hvd.ProcessSet([size_env - 1]) if size_env > 1 else None
    hvd.init(process_sets=[last] if last else [])
    size, rank = hvd.size(), hvd.rank()
    dev = _use_device(device)
    report = {}

    def check(name, fn):
        try:
            outcome = fn()
            report[name] = None if outcome is True else "rank %d: %s" % (rank, outcome)
        except Exception:
            report[name] = "rank %d: %s" % (rank, traceback.format_exc())

    gen = torch.Generator().manual_seed(1234 + rank)
    # Every tensor below goes to `dev` with copy=True: on the CPU, to() would
    # otherwise hand back the input itself, and an in-place collective would
    # change the CPU reference's input too.

    def rand(shape, dtype):
        """Random data, different on every rank and every call (never zeros)."""
        if dtype == torch.bool:
            return torch.rand(shape, generator=gen) > 0.5
        if dtype in FLOATS:
            return (torch.randn(shape, generator=gen, dtype=torch.float64) * 4).to(dtype)
        low = 0 if dtype == torch.uint8 else -3
        return torch.randint(low, 4, shape, generator=gen).to(dtype)

    def same(on_dev, cpu):
        """The result on `dev` equals the CPU engine's (floats within rounding)."""
        if on_dev.device != dev:
            return "result on %s, expected %s" % (on_dev.device, dev)
        g = on_dev.cpu()
        if g.shape != cpu.shape or g.dtype != cpu.dtype:
            return "got %s %s, expected %s %s" % (tuple(g.shape), g.dtype, tuple(cpu.shape), cpu.dtype)
        if cpu.dtype in FLOATS:
            # Two ranks' sums round alike in any order; from three ranks on,
            # the GPU may add in another order than the CPU engine (the
            # hierarchical allreduce sums each host first), and each partial
            # sum rounds at the scale of the inputs (|x| rarely above 16
            # here, a scale factor up to 1.5), not of the result.
            eps = torch.finfo(cpu.dtype).eps
            order = 32 * size * size * eps if size > 2 else 0.0
            rtol, atol = (1e-2, 1e-2) if cpu.dtype in (torch.float16, torch.bfloat16) else (1e-6, 1e-9)
            ok = torch.allclose(g.double(), cpu.double(), rtol=rtol, atol=max(atol, order))
        else:
            ok = torch.equal(g, cpu)
        return True if ok else "differs from the CPU engine:\n%s\n%s" % (g.flatten()[:8], cpu.flatten()[:8])

    def all_same(on_dev, cpus):
        for g, c in zip(on_dev, cpus):
            outcome = same(g, c)
            if outcome is not True:
                return outcome
        return True

    ops = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
    for dtype in DTYPES:
        d = str(dtype).split(".")[1]
        for op_name, op in ops.items():
            if dtype == torch.bool and op_name == "average":
                continue
            x = rand((3, 5), dtype)
            scale = {"prescale_factor": 0.5, "postscale_factor": 3.0} if dtype in FLOATS and op_name == "sum" else {}
            check("allreduce/%s/%s" % (d, op_name), lambda: same(
                hvd.allreduce(x.to(dev, copy=True), op=op, name="g.%s.%s" % (d, op_name), **scale),
                hvd.allreduce(x, op=op, name="c.%s.%s" % (d, op_name), **scale)))
        x = rand((1000,), dtype)

        def in_place():
            y = x.to(dev, copy=True)
            hvd.allreduce_(y, op=hvd.Sum, name="inplace." + d)
            return same(y, hvd.allreduce(x, op=hvd.Sum, name="inplace.cpu." + d))
        check("allreduce_/%s" % d, in_place)
        # Fusion: odd sizes put tensors at unaligned offsets of the fusion buffer.
        group = [rand((n,), dtype) for n in (1, 3, 7, 1000, 65537)]
        scale = {"prescale_factor": 2.0, "postscale_factor": 0.25} if dtype in FLOATS else {}
        check("grouped_allreduce/%s" % d, lambda: all_same(
            hvd.grouped_allreduce([t.to(dev, copy=True) for t in group], op=hvd.Sum, name="gg." + d, **scale),
            hvd.grouped_allreduce(group, op=hvd.Sum, name="cg." + d, **scale)))

        def fused_async():
            ys = [t.to(dev, copy=True) for t in group]
            handles = [hvd.allreduce_async_(y, op=hvd.Sum, name="async.%s.%d" % (d, i)) for i, y in enumerate(ys)]
            for h in handles:
                hvd.synchronize(h)
            return all_same(ys, hvd.grouped_allreduce(group, op=hvd.Sum, name="async.cpu." + d))
        check("async_allreduce_/%s" % d, fused_async)
        x = rand((rank + 1, 4), dtype)  # uneven first dimensions
        check("allgather/%s" % d, lambda: same(hvd.allgather(x.to(dev, copy=True), name="ga." + d),
                                              hvd.allgather(x, name="ca." + d)))
        x = rand((6, 2), dtype)
        check("broadcast/%s" % d, lambda: same(hvd.broadcast(x.to(dev, copy=True), root_rank=size - 1, name="gb." + d),
                                              hvd.broadcast(x, root_rank=size - 1, name="cb." + d)))

        def broadcast_in_place():
            y = x.to(dev, copy=True)
            hvd.broadcast_(y, root_rank=0, name="gb_." + d)
            return same(y, hvd.broadcast(x, root_rank=0, name="cb_." + d))
        check("broadcast_/%s" % d, broadcast_in_place)
        splits = [(rank + m) % 3 + 1 for m in range(size)]
        x = rand((sum(splits), 3), dtype)

        def alltoall():
            g, g_splits = hvd.alltoall(x.to(dev, copy=True), splits=torch.tensor(splits, device=dev), name="gt." + d)
            c, c_splits = hvd.alltoall(x, splits=torch.tensor(splits), name="ct." + d)
            if g_splits.device != dev:  # with the splits tensor, as Horovod returns them
                return "received splits on %s" % g_splits.device
            return same(g, c) if torch.equal(g_splits.cpu(), c_splits) else "received splits %s" % g_splits
        check("alltoall/%s" % d, alltoall)
        if dtype != torch.bool:
            x = rand((2 * size + 1, 3), dtype)  # uneven blocks
            for op_name in ("sum", "average"):
                check("reducescatter/%s/%s" % (d, op_name), lambda: same(
                    hvd.reducescatter(x.to(dev, copy=True), op=ops[op_name], name="gr.%s.%s" % (d, op_name)),
                    hvd.reducescatter(x, op=ops[op_name], name="cr.%s.%s" % (d, op_name))))
        if dtype in FLOATS:
            group = [rand((n,), dtype) for n in (5, 300)]
            check("adasum/%s" % d, lambda: all_same(
                hvd.grouped_allreduce([t.to(dev, copy=True) for t in group], op=hvd.Adasum, name="gd." + d),
                hvd.grouped_allreduce(group, op=hvd.Adasum, name="cd." + d)))

    if last is not None and rank == size - 1:
        x = rand((100,), torch.float32)
        check("process_set_of_one", lambda: same(hvd.allreduce(x.to(dev, copy=True), op=hvd.Sum, process_set=last), x))
    if size > 1 and dev.type == "cuda":
        # The same name on a GPU tensor here and a CPU tensor there: a mismatch on every rank.
        def mismatch():
            try:
                hvd.allreduce(torch.ones(2, device=dev) if rank == 0 else torch.ones(2), name="mixed")
            except hvd.HorovodInternalError as e:
                return True if "Mismatched devices" in str(e) and "GPU" in str(e) else str(e)
            return "no error"
        check("cpu_and_gpu_mismatch", mismatch)

    if expect_transport:
        # Which transport moved the tensors (rank 0's timeline names it).
        timeline = os.path.join(tempfile.mkdtemp(), "timeline.json")
        hvd.start_timeline(timeline)
        hvd.allreduce(torch.ones(1000, device=dev), name="transport_probe")
        hvd.stop_timeline()
        if rank == 0:
            check("transport", lambda: True if expect_transport in open(timeline).read()
                  else open(timeline).read()[-2000:])
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return report


def training_matches_the_cpu(device="cuda"):
    """Trains the same model on `device` and on the CPU; returns {check: passed}."""
    hvd.init()
    rank = hvd.rank()
    dev = _use_device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def train(device, compression):
        torch.manual_seed(rank)  # different initial weights: the broadcast must fix them
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
        hvd.broadcast_parameters(model.state_dict(), 0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                       named_parameters=model.named_parameters(), compression=compression)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        data = torch.Generator().manual_seed(100 + rank)
        for step in range(5):
            x = torch.randn(8, 16, generator=data).to(device)
            y = torch.randn(8, 4, generator=data).to(device)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    report = {}
    for compression in (hvd.Compression.none, hvd.Compression.fp16):
        name = compression.__name__ if hasattr(compression, "__name__") else type(compression).__name__
        cpu = train(torch.device("cpu"), compression)
        on_dev = train(dev, compression)
        tol = 1e-4 if compression is hvd.Compression.none else 2e-3
        report[name] = all(torch.allclose(g, c, atol=tol, rtol=tol) for g, c in zip(on_dev, cpu))
        flat = torch.cat([p.reshape(-1) for p in on_dev]).to(dev)
        everyone = hvd.allgather(flat.unsqueeze(0), name="replicas." + name)
        report[name + "_replicas_equal"] = all(torch.equal(everyone[0], e) for e in everyone)
    return report


def rank_1_dies_inside_nccl():
    """Rank 1 keeps its GPU busy and is SIGKILLed while rank 0 waits in an NCCL allreduce.

    Rank 0 returns what the collective and the one after it raised, and how long the first took.
    """
    hvd.init()
    rank = hvd.rank()
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    x = torch.ones(1 << 20, device=dev)
    hvd.allreduce_(x, name="warmup")  # NCCL is up on both ranks
    if rank == 1:
        # Keep this rank's GPU stream busy, so its NCCL kernel cannot start and
        # rank 0's waits inside NCCL; then die.
        torch.cuda._sleep(int(5e9))
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    t0 = time.time()
    try:
        hvd.allreduce_(x, name="never_finishes")
        outcome = "completed"
    except hvd.HorovodInternalError as e:
        outcome = str(e)
    elapsed = time.time() - t0
    try:
        hvd.allreduce_(x, name="after")
        later = "completed"
    except hvd.HorovodInternalError as e:
        later = str(e)
    return {"outcome": outcome, "later": later, "elapsed": elapsed}
