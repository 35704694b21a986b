#!/usr/bin/env python3
"""GPU benchmarks of hvd-core's CUDA data plane (run by tools/gpu_check.sh).

  python tools/gpu_benchmark.py kernels            # pack/scale kernel vs device copy bandwidth
  python tools/gpu_benchmark.py allreduce --np 2   # hvd vs torch.distributed NCCL, same processes

kernels: the plugin's batched copy/scale kernel (the fusion pack and unpack,
pre/post scaling) against torch's device-to-device copy of the same bytes,
counting bytes read plus bytes written, median of repeated back-to-back runs.

allreduce: `np` ranks (real processes, hvd's test launcher) each time hvd's
allreduce (in place and out of place) and torch.distributed's NCCL
all_reduce (in place) on the same float32 tensors in one sitting, alternating
per size. With more ranks than GPUs every rank gets its own NCCL_HOSTID, so
NCCL runs between them over its socket transport on loopback (a single-GPU
machine cannot show NVLink speeds, but both sides pay the same). Prints a
markdown table; --json writes the numbers.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time


def _plugin():
    """The CUDA plugin's function table (src/gpu/gpu_plugin.h), through ctypes."""
    from horovod.common import config
    path = os.environ.get("HVD_CUDA_PLUGIN") or os.path.join(os.path.dirname(config.get_library_path()),
                                                              "libhvd_core_cuda.so")
    lib = ctypes.CDLL(path)
    lib.hvd_gpu_plugin_get.restype = ctypes.c_void_p
    names = ["describe", "device_bus_id", "event_record", "event_query", "event_destroy", "stream_create",
             "stream_destroy", "stream_wait_event", "stream_mark", "stream_synchronize", "copy", "zero",
             "copy_scaled"]

    class Table(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_size_t), ("abi_version", ctypes.c_uint32)] + [
            (n, ctypes.c_void_p) for n in names]

    table = Table.from_address(lib.hvd_gpu_plugin_get())
    status = ctypes.create_string_buffer(1028)
    proto = {
        "stream_create": ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p),
        "stream_synchronize": ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p),
        "copy_scaled": ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_int32, ctypes.c_double, ctypes.c_void_p),
    }
    fns = {n: p(getattr(table, n)) for n, p in proto.items()}
    return lib, fns, status


class _Copy(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("src", ctypes.c_void_p), ("count", ctypes.c_size_t)]


_HVD_DTYPE = {"float32": 8, "float16": 6, "bfloat16": 7}


def bench_kernels(reps=30):
    import torch
    _lib, fns, status = _plugin()
    device = torch.cuda.current_device()
    stream = fns["stream_create"](device, status)
    assert stream, status.raw[4:200]
    rows = []
    for total_mib in (64, 256):
        for pieces in (1, 100):
            for dtype_name, factor in (("float32", 1.0), ("float32", 0.5), ("float16", 0.5), ("bfloat16", 0.5)):
                dtype = getattr(torch, dtype_name)
                esize = torch.tensor([], dtype=dtype).element_size()
                count = (total_mib << 20) // esize
                src = torch.randn(count, device="cuda").to(dtype)
                dst = torch.empty_like(src)
                per = count // pieces
                copies = (_Copy * pieces)(*[_Copy(dst.data_ptr() + i * per * esize, src.data_ptr() + i * per * esize,
                                                  per) for i in range(pieces)])

                def run_hvd():
                    rc = fns["copy_scaled"](stream, ctypes.addressof(copies), pieces, _HVD_DTYPE[dtype_name],
                                            factor, status)
                    assert rc == 0, status.raw[4:300]

                def sync_hvd():
                    assert fns["stream_synchronize"](stream, status) == 0

                hvd_s = _time(run_hvd, sync_hvd, reps)
                expected = (src.float() * factor).to(dtype) if factor != 1.0 else src
                run_hvd()
                sync_hvd()
                correct = torch.equal(dst[:per * pieces], expected[:per * pieces])
                copy_s = _time(lambda: dst.copy_(src), torch.cuda.synchronize, reps)
                nbytes = 2 * per * pieces * esize  # read + written
                rows.append({"MiB": total_mib, "tensors": pieces, "dtype": dtype_name, "factor": factor,
                             "hvd_GBps": nbytes / hvd_s / 1e9, "copy_GBps": nbytes / copy_s / 1e9,
                             "ratio": copy_s / hvd_s, "correct": correct})
    print("| MiB | tensors | dtype | factor | hvd kernel GB/s | torch copy GB/s | hvd/copy | correct |")
    print("|---:|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        print("| %(MiB)d | %(tensors)d | %(dtype)s | %(factor)g | %(hvd_GBps).0f | %(copy_GBps).0f | %(ratio).2f |"
              " %(correct)s |" % r)
    return rows


def _time(fn, sync, reps):
    """Median of 3 batches of `reps` back-to-back runs (seconds per run)."""
    fn()
    sync()
    batches = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        batches.append((time.perf_counter() - start) / reps)
    return statistics.median(batches)


ALLREDUCE_RANK = r'''
import json, os, statistics, time
import torch
import torch.distributed as dist
import horovod.torch as hvd
hvd.init()
size, rank = hvd.size(), hvd.rank()
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
dist.init_process_group("nccl", rank=rank, world_size=size, device_id=dev)
rows = []
for nbytes in (4, 4096, 1 << 20, 16 << 20, 64 << 20, 256 << 20):
    x = torch.randn(nbytes // 4, device=dev)
    reps = 200 if nbytes <= (1 << 20) else (40 if nbytes <= (16 << 20) else 10)
    def t_hvd_in():
        hvd.allreduce_(x, op=hvd.Sum, name="in%d" % nbytes)
    def t_hvd_out():
        hvd.allreduce(x, op=hvd.Sum, name="out%d" % nbytes)
    def t_torch():
        dist.all_reduce(x)
        torch.cuda.synchronize()
    times = {"hvd_in": [], "hvd_out": [], "torch": []}
    for fn in (t_hvd_in, t_hvd_out, t_torch):
        for _ in range(3):
            fn()  # warm-up: NCCL connections, caches
    torch.cuda.synchronize()
    for _ in range(reps):
        for key, fn in (("hvd_in", t_hvd_in), ("hvd_out", t_hvd_out), ("torch", t_torch)):
            hvd.barrier() if nbytes > (1 << 20) else None
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    rows.append({"bytes": nbytes, **{k: statistics.median(v) for k, v in times.items()}})
dist.destroy_process_group()
print(json.dumps(rows))
'''


def bench_allreduce(np_):
    from horovod.common import testing
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000)}
    overrides = {}
    import torch
    if np_ > torch.cuda.device_count():
        env.update({"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"})
        overrides = {r: {"NCCL_HOSTID": "hvd-bench-%d" % r} for r in range(np_)}
    results = testing.run(np_, ALLREDUCE_RANK, timeout=500, env=env, rank_env_overrides=overrides)
    for res in results:
        if res.returncode != 0:
            print(str(res)[-4000:])
            sys.exit(1)
    rows = results[0].last_json()
    factor = 2.0 * (np_ - 1) / np_ if np_ > 1 else 1.0
    print("np=%d (%s)" % (np_, "bus bandwidth" if np_ > 1 else "algorithm bandwidth: one rank"))
    print("| bytes | hvd in place us | hvd out of place us | torch NCCL us | hvd in GB/s | hvd out GB/s |"
          " torch GB/s | hvd in / torch | hvd out / torch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        bw = {k: r["bytes"] * factor / r[k] / 1e9 for k in ("hvd_in", "hvd_out", "torch")}
        print("| %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
            r["bytes"], r["hvd_in"] * 1e6, r["hvd_out"] * 1e6, r["torch"] * 1e6, bw["hvd_in"], bw["hvd_out"],
            bw["torch"], r["torch"] / r["hvd_in"], r["torch"] / r["hvd_out"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["kernels", "allreduce"])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    rows = bench_kernels() if args.what == "kernels" else bench_allreduce(args.np)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
