"""A rank of the multi-host tests (test_across_hosts.py): every collective, on the
whole job and on process sets whose members sit on different hosts, checked against
what the ranks' inputs make the answer; prints one REPORT line as JSON.

    python across_hosts_worker.py [--digest] [--mb N] [--hold-seconds S --raised-dir DIR] [--tuning-steps N]

--digest adds a SHA-256 of the results of a few collectives (a 4 MiB allreduce among
them) to the report, for comparing jobs run with different settings.
--mb N adds an N MiB allreduce and reports each NIC's transmitted bytes around it
(from /sys/class/net, which is this host's own); --hold-seconds S then allreduces in a
loop for S seconds, printing a STEP line per step (the fault tests cut hosts during it).
A rank whose collective raises there writes when and what to DIR/raised.<rank>.json
(the hosts share this machine's file system) and exits with status 1.
--tuning-steps N first runs N checked training-like steps (three allreduces in flight
at once, then an allgather), for HOROVOD_AUTOTUNE to sample while it switches settings.
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import time

import numpy as np

import horovod.common as hvd


def nic_tx_bytes():
    out = {}
    for name in os.listdir("/sys/class/net"):
        try:
            with open(f"/sys/class/net/{name}/statistics/tx_bytes") as f:
                out[name] = int(f.read())
        except OSError:
            pass
    return out


def expect(condition, what):
    if not condition:
        raise AssertionError(f"rank {hvd.rank()} on {socket.gethostname()}: {what}")


def check_collectives(ps, tag):
    """Runs each collective on process set `ps` and checks its result."""
    members = ps.ranks if ps.ranks is not None else list(range(hvd.size()))
    if hvd.rank() not in members:
        return
    me, n = hvd.rank(), len(members)
    total = float(sum(members))
    got = hvd.allreduce(np.arange(1000, dtype=np.float32) + me, op=hvd.Sum, name=f"{tag}.sum", process_set=ps)
    expect(np.array_equal(got, np.arange(1000, dtype=np.float32) * n + total), f"{tag} allreduce")
    got = hvd.allreduce(np.full(7, float(me)), op=hvd.Max, name=f"{tag}.max", process_set=ps)
    expect(np.all(got == max(members)), f"{tag} allreduce max")
    grouped = hvd.grouped_allreduce([np.full(3, float(me)), np.full(5, 1.0, dtype=np.float64)], op=hvd.Sum,
                                    name=f"{tag}.grouped", process_set=ps)
    expect(np.all(grouped[0] == total) and np.all(grouped[1] == n), f"{tag} grouped allreduce")
    # Uneven first dimensions: rank r contributes r + 1 rows.
    got = hvd.allgather(np.full((me + 1, 2), me, dtype=np.int64), name=f"{tag}.gather", process_set=ps)
    expect(got[:, 0].tolist() == [r for r in members for _ in range(r + 1)], f"{tag} allgather")
    root = members[-1]  # a global rank, and not the set's first member
    got = hvd.broadcast(np.full(4, float(me)), root_rank=root, name=f"{tag}.bcast", process_set=ps)
    expect(np.all(got == root), f"{tag} broadcast from rank {root}")
    # Rank r sends the value 100*r + (destination's index) to each member.
    send = np.array([100 * me + i for i in range(n)], dtype=np.int32)
    got = hvd.alltoall(send, name=f"{tag}.alltoall", process_set=ps)
    index = members.index(me)
    expect(got.tolist() == [100 * r + index for r in members], f"{tag} alltoall")
    got = hvd.reducescatter(np.arange(2 * n, dtype=np.float32), op=hvd.Sum, name=f"{tag}.rs", process_set=ps)
    expect(got.tolist() == [float(n * v) for v in range(2 * index, 2 * index + 2)], f"{tag} reducescatter")
    expect(hvd.broadcast_object({"from": me}, root_rank=root, process_set=ps) == {"from": root},
           f"{tag} broadcast_object")
    hvd.barrier(process_set=ps)


def results_digest():
    """SHA-256 over the results of collectives whose bytes cross the hosts' links."""
    me, n = hvd.rank(), hvd.size()
    h = hashlib.sha256()
    values = (np.arange(1 << 20, dtype=np.float32) % 1009) * (me + 1)  # 4 MiB: many frames on every link
    h.update(hvd.allreduce(values, op=hvd.Sum, name="digest.sum").tobytes())
    h.update(hvd.allgather(np.arange(1000 + me, dtype=np.int64) * (me + 3), name="digest.gather").tobytes())
    h.update(hvd.broadcast(np.linspace(0, 1, 300000) + me, root_rank=n - 1, name="digest.bcast").tobytes())
    h.update(hvd.alltoall(np.arange(5000 * n, dtype=np.int32) + me, name="digest.alltoall").tobytes())
    h.update(json.dumps(hvd.allgather_object({"rank": me, "text": "x" * (100 * me)})).encode())
    return h.hexdigest()


def tuning_steps(steps):
    """Steps of three 64 KiB allreduces in flight together and an allgather, each result checked."""
    me, n = hvd.rank(), hvd.size()
    for step in range(steps):
        handles = [hvd.allreduce_async(np.full(16384, float(me + k + step), np.float32), op=hvd.Sum,
                                       name=f"tune.grad{k}") for k in range(3)]
        for k, handle in enumerate(handles):
            got = hvd.synchronize(handle)
            expect(np.all(got == sum(r + k + step for r in range(n))), f"tuning step {step} allreduce {k}")
        got = hvd.allgather(np.full((2, 3), me + step, np.int32), name="tune.gather")
        expect(got[:, 0].tolist() == [r + step for r in range(n) for _ in range(2)], f"tuning step {step} allgather")


def lane_calls_of_small_allreduces(ps, tag, calls=200):
    """How many of `calls` small synchronous allreduces on `ps` ran in the
    same-host fast lane (which only sets whose ranks share a host have)."""
    before = int(ps._info().fast_lane_calls)
    x = np.ones(16, dtype=np.float32)
    for _ in range(calls):
        hvd.allreduce_(x, op=hvd.Max, name=f"{tag}.lane", process_set=ps)
    expect(np.all(x == 1.0), f"{tag} small allreduces")
    return int(ps._info().fast_lane_calls) - before


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--mb", type=int, default=0)
    parser.add_argument("--hold-seconds", type=float, default=0.0)
    parser.add_argument("--raised-dir")
    parser.add_argument("--tuning-steps", type=int, default=0)
    args = parser.parse_args()
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"  # the sets below depend on the size
    hvd.init()
    size = hvd.size()
    # Sets whose members are on different hosts (ranks fill hosts in order).
    spans = [hvd.add_process_set([0, size - 1])] if size > 2 else []
    if size >= 4:
        spans.append(hvd.add_process_set([1, 2]))
    # Ranks 0 and 1, on the first host whenever it has two slots.
    first_host = hvd.add_process_set([0, 1]) if size >= 4 else None
    tuning_steps(args.tuning_steps)
    check_collectives(hvd.global_process_set, "global")
    for i, ps in enumerate(spans):
        check_collectives(ps, f"set{i}")
    report = {"rank": hvd.rank(), "size": size, "host": socket.gethostname(),
              "local": [hvd.local_rank(), hvd.local_size()], "cross": [hvd.cross_rank(), hvd.cross_size()],
              "env": {k: v for k, v in os.environ.items() if k.startswith("HVD_TEST_FORWARD")},
              "lane_calls": {"global": lane_calls_of_small_allreduces(hvd.global_process_set, "global")}}
    if first_host is not None and hvd.rank() in (0, 1):
        report["lane_calls"]["first_host"] = lane_calls_of_small_allreduces(first_host, "first_host")
    if args.digest:
        report["digest"] = results_digest()
        report["data_knobs"] = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_DATA_")}
    if args.mb:
        before = nic_tx_bytes()
        data = np.ones(args.mb * (1 << 20) // 4, dtype=np.float32)
        got = hvd.allreduce(data, op=hvd.Sum, name="big")
        expect(got[0] == size and got[-1] == size, "large allreduce")
        # This rank's last bytes may still sit in its socket buffer when its
        # allreduce returns; once every rank has left the allreduce (the
        # barrier), they have crossed the wire and the counters hold them.
        hvd.barrier()
        after = nic_tx_bytes()
        report["tx_bytes"] = {k: after[k] - before.get(k, 0) for k in after}
    sys.stdout.write("REPORT " + json.dumps(report) + "\n")
    sys.stdout.flush()
    deadline = time.monotonic() + args.hold_seconds
    step = 0
    while time.monotonic() < deadline:
        try:
            hvd.allreduce(np.ones(1024, dtype=np.float32), name=f"hold.{step}")
        except hvd.HorovodInternalError as e:
            if args.raised_dir:
                with open(os.path.join(args.raised_dir, f"raised.{hvd.rank()}.json"), "w") as f:
                    json.dump({"rank": hvd.rank(), "host": socket.gethostname(), "time": time.time(),
                               "error": str(e)}, f)
            sys.exit(1)
        sys.stdout.write(f"STEP {step} {time.time():.3f}\n")
        sys.stdout.flush()
        step += 1
        time.sleep(0.05)
    hvd.shutdown()


if __name__ == "__main__":
    main()
