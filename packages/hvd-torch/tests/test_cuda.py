# test_cuda.py - CUDA tensors through hvd-core's GPU data plane (NCCL, or
# staged through host memory), at 1 and 2 real ranks: every collective and
# dtype against the CPU engine on the same random data, DistributedOptimizer
# training against the same training on the CPU, and a rank killed while its
# peer waits inside NCCL. Skipped where torch sees no GPU or hvd-core has no
# CUDA plugin; tools/gpu_check.sh runs them on a GPU machine.
#
# One machine usually has one GPU, and NCCL refuses two ranks on one GPU of
# one host. The "nccl" runs give each rank its own NCCL_HOSTID, so NCCL
# treats them as two hosts (its socket transport over loopback): every hvd
# code path of a real multi-GPU job runs, only slower. Without that, hvd
# notices the shared GPU and stages through host memory ("staged" runs).
import json

import pytest

import torch_ranks


def _gpu_ready():
    try:
        import torch
        from horovod.common import c_api
        return torch.cuda.is_available() and c_api.gpu_info()["cuda_available"]
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _gpu_ready(), reason="needs a CUDA GPU and hvd-core's CUDA plugin")

# Two ranks, one GPU: NCCL across two pretend hosts on loopback.
NCCL_TWO_RANKS = dict(env={"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"},
                      rank_env_overrides={0: {"NCCL_HOSTID": "hvd-test-0"}, 1: {"NCCL_HOSTID": "hvd-test-1"}})
MODES = {
    (1, "nccl"): {},
    (2, "nccl"): NCCL_TWO_RANKS,
    (2, "staged"): {},  # both ranks on the one GPU: hvd stages through host memory
    # NCCL could run, but the knob sends CUDA tensors through the CPU transports.
    (2, "gpu_operations_mpi"): dict(NCCL_TWO_RANKS, env=dict(NCCL_TWO_RANKS["env"], HOROVOD_GPU_OPERATIONS="MPI")),
    # Two pretend hosts of two ranks: NCCL within each, TCP between them.
    (4, "hierarchical"): dict(hosts=["gpu-host-a", "gpu-host-a", "gpu-host-b", "gpu-host-b"],
                              env=dict(NCCL_TWO_RANKS["env"], HOROVOD_HIERARCHICAL_ALLREDUCE="1"),
                              rank_env_overrides={r: {"NCCL_HOSTID": "hvd-test-%d" % r} for r in range(4)}),
}
EXPECTED_TRANSPORT = {"nccl": "NCCL_ALLREDUCE", "staged": "STAGED_ALLREDUCE", "gpu_operations_mpi": "STAGED_ALLREDUCE",
                      "hierarchical": "HIERARCHICAL_ALLREDUCE"}

COLLECTIVES = r'''
import tempfile, traceback
size_env = int(os.environ["HOROVOD_SIZE"])
last = hvd.ProcessSet([size_env - 1]) if size_env > 1 else None
hvd.init(process_sets=[last] if last else [])
size, rank = hvd.size(), hvd.rank()
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
report = {}

def check(name, fn):
    try:
        outcome = fn()
        report[name] = None if outcome is True else "rank %d: %s" % (rank, outcome)
    except Exception:
        report[name] = "rank %d: %s" % (rank, traceback.format_exc())

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
gen = torch.Generator().manual_seed(1234 + rank)

def rand(shape, dtype):
    """Random data, different on every rank and every call (never zeros)."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype in FLOATS:
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * 4).to(dtype)
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=gen).to(dtype)

def same(gpu, cpu):
    """The GPU result equals the CPU engine's (floats within rounding)."""
    if gpu.device != dev:
        return "result on %s, expected %s" % (gpu.device, dev)
    g = gpu.cpu()
    if g.shape != cpu.shape or g.dtype != cpu.dtype:
        return "got %s %s, expected %s %s" % (tuple(g.shape), g.dtype, tuple(cpu.shape), cpu.dtype)
    if cpu.dtype in (torch.float16, torch.bfloat16):
        ok = torch.allclose(g.double(), cpu.double(), rtol=1e-2, atol=1e-2)
    elif cpu.dtype in FLOATS:
        ok = torch.allclose(g, cpu, rtol=1e-6, atol=1e-9)
    else:
        ok = torch.equal(g, cpu)
    return True if ok else "differs from the CPU engine:\n%s\n%s" % (g.flatten()[:8], cpu.flatten()[:8])

def all_same(gpus, cpus):
    for g, c in zip(gpus, cpus):
        outcome = same(g, c)
        if outcome is not True:
            return outcome
    return True

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
for dtype in DTYPES:
    d = str(dtype).split(".")[1]
    for op_name, op in OPS.items():
        if dtype == torch.bool and op_name == "average":
            continue
        x = rand((3, 5), dtype)
        scale = {"prescale_factor": 0.5, "postscale_factor": 3.0} if dtype in FLOATS and op_name == "sum" else {}
        check("allreduce/%s/%s" % (d, op_name), lambda: same(
            hvd.allreduce(x.to(dev), op=op, name="g.%s.%s" % (d, op_name), **scale),
            hvd.allreduce(x, op=op, name="c.%s.%s" % (d, op_name), **scale)))
    x = rand((1000,), dtype)
    def in_place():
        y = x.to(dev)
        hvd.allreduce_(y, op=hvd.Sum, name="inplace." + d)
        return same(y, hvd.allreduce(x, op=hvd.Sum, name="inplace.cpu." + d))
    check("allreduce_/%s" % d, in_place)
    # Fusion: odd sizes put tensors at unaligned offsets of the fusion buffer.
    group = [rand((n,), dtype) for n in (1, 3, 7, 1000, 65537)]
    scale = {"prescale_factor": 2.0, "postscale_factor": 0.25} if dtype in FLOATS else {}
    check("grouped_allreduce/%s" % d, lambda: all_same(
        hvd.grouped_allreduce([t.to(dev) for t in group], op=hvd.Sum, name="gg." + d, **scale),
        hvd.grouped_allreduce(group, op=hvd.Sum, name="cg." + d, **scale)))
    def fused_async():
        ys = [t.to(dev) for t in group]
        handles = [hvd.allreduce_async_(y, op=hvd.Sum, name="async.%s.%d" % (d, i)) for i, y in enumerate(ys)]
        for h in handles:
            hvd.synchronize(h)
        return all_same(ys, hvd.grouped_allreduce(group, op=hvd.Sum, name="async.cpu." + d))
    check("async_allreduce_/%s" % d, fused_async)
    x = rand((rank + 1, 4), dtype)  # uneven first dimensions
    check("allgather/%s" % d, lambda: same(hvd.allgather(x.to(dev), name="ga." + d),
                                          hvd.allgather(x, name="ca." + d)))
    x = rand((6, 2), dtype)
    check("broadcast/%s" % d, lambda: same(hvd.broadcast(x.to(dev), root_rank=size - 1, name="gb." + d),
                                          hvd.broadcast(x, root_rank=size - 1, name="cb." + d)))
    def broadcast_in_place():
        y = x.to(dev)
        hvd.broadcast_(y, root_rank=0, name="gb_." + d)
        return same(y, hvd.broadcast(x, root_rank=0, name="cb_." + d))
    check("broadcast_/%s" % d, broadcast_in_place)
    splits = [(rank + m) % 3 + 1 for m in range(size)]
    x = rand((sum(splits), 3), dtype)
    def alltoall():
        g, g_splits = hvd.alltoall(x.to(dev), splits=torch.tensor(splits, device=dev), name="gt." + d)
        c, c_splits = hvd.alltoall(x, splits=torch.tensor(splits), name="ct." + d)
        if g_splits.device != dev:  # with the splits tensor, as Horovod returns them
            return "received splits on %s" % g_splits.device
        return same(g, c) if torch.equal(g_splits.cpu(), c_splits) else "received splits %s" % g_splits
    check("alltoall/%s" % d, alltoall)
    if dtype != torch.bool:
        x = rand((2 * size + 1, 3), dtype)  # uneven blocks
        for op_name in ("sum", "average"):
            check("reducescatter/%s/%s" % (d, op_name), lambda: same(
                hvd.reducescatter(x.to(dev), op=OPS[op_name], name="gr.%s.%s" % (d, op_name)),
                hvd.reducescatter(x, op=OPS[op_name], name="cr.%s.%s" % (d, op_name))))
    if dtype in FLOATS:
        group = [rand((n,), dtype) for n in (5, 300)]
        check("adasum/%s" % d, lambda: all_same(
            hvd.grouped_allreduce([t.to(dev) for t in group], op=hvd.Adasum, name="gd." + d),
            hvd.grouped_allreduce(group, op=hvd.Adasum, name="cd." + d)))

if last is not None and rank == size - 1:
    x = rand((100,), torch.float32)
    check("process_set_of_one", lambda: same(hvd.allreduce(x.to(dev), op=hvd.Sum, process_set=last), x))
if size > 1:
    # The same name on a GPU tensor here and a CPU tensor there: a mismatch on every rank.
    def mismatch():
        try:
            hvd.allreduce(torch.ones(2, device=dev) if rank == 0 else torch.ones(2), name="mixed")
        except hvd.HorovodInternalError as e:
            return True if "Mismatched devices" in str(e) and "GPU" in str(e) else str(e)
        return "no error"
    check("cpu_and_gpu_mismatch", mismatch)

# Which transport moved the CUDA tensors (rank 0's timeline names it).
timeline = os.path.join(tempfile.mkdtemp(), "timeline.json")
hvd.start_timeline(timeline)
hvd.allreduce(torch.ones(1000, device=dev), name="transport_probe")
hvd.stop_timeline()
if rank == 0:
    expected = os.environ["EXPECT_TRANSPORT"]
    check("transport", lambda: True if expected in open(timeline).read() else open(timeline).read()[-2000:])
torch.cuda.synchronize()
print(json.dumps(report))
'''


@pytest.mark.parametrize("size,mode", list(MODES))
def test_every_collective_and_dtype_on_cuda_equals_the_cpu_engine(size, mode):
    kwargs = dict(MODES[(size, mode)])
    kwargs["env"] = dict(kwargs.get("env", {}), EXPECT_TRANSPORT=EXPECTED_TRANSPORT[mode])
    reports = torch_ranks.run_ok(size, COLLECTIVES, timeout=300, **kwargs)
    failures = {k: v for report in reports for k, v in report.items() if v is not None}
    assert not failures, json.dumps(failures, indent=1)[:6000]
    # Every check ran: 14 per integer dtype, 15 per float, 11 for bool, and the transport.
    assert len(reports[0]) >= 5 * 14 + 4 * 15 + 11 + 1, sorted(reports[0])


TRAINING = r'''
hvd.init()
size, rank = hvd.size(), hvd.rank()
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
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
    gpu = train(dev, compression)
    tol = 1e-4 if compression is hvd.Compression.none else 2e-3
    report[name] = all(torch.allclose(g, c, atol=tol, rtol=tol) for g, c in zip(gpu, cpu))
    flat = torch.cat([p.reshape(-1) for p in gpu]).to(dev)
    everyone = hvd.allgather(flat.unsqueeze(0), name="replicas." + name)
    report[name + "_replicas_equal"] = all(torch.equal(everyone[0], e) for e in everyone)
print(json.dumps(report))
'''


@pytest.mark.parametrize("size,mode", [(1, "nccl"), (2, "nccl")])
def test_distributed_optimizer_on_cuda_trains_as_on_the_cpu(size, mode):
    for rank, report in enumerate(torch_ranks.run_ok(size, TRAINING, timeout=300, **MODES[(size, mode)])):
        assert report and all(report.values()), "rank %d: %s" % (rank, report)


KILLED = r'''
import signal, threading
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
print(json.dumps({"outcome": outcome, "later": later, "elapsed": elapsed}))
'''


def test_a_killed_rank_ends_the_nccl_collective_its_peer_waits_in():
    kwargs = dict(NCCL_TWO_RANKS)
    kwargs["env"] = dict(kwargs["env"], HOROVOD_PEER_TIMEOUT_SECONDS="3")
    results = torch_ranks.run(2, KILLED, timeout=120, **kwargs)
    assert results[1].returncode == -9, str(results[1])
    assert results[0].returncode == 0, str(results[0])
    report = results[0].last_json()
    assert report["outcome"] != "completed" and report["later"] != "completed", report
    assert report["elapsed"] < 15, report
