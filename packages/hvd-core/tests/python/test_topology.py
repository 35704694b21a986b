# test_topology.py - the transports behind the same API: shared memory on one
# host, TCP only (HOROVOD_SHM_DISABLE=1), and hierarchical shared memory +
# TCP across "hosts" (distinct HOROVOD_HOSTNAMEs on this machine).
import json
import re

import pytest

import ranks

BATTERY = '''
hvd.init()
size, rank = hvd.size(), hvd.rank()
out = {"topology": [hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()]}
ok = {}
for n in [1, 5, 1000, 100003, 2 * 1024 * 1024 + 3]:
    for dtype in [np.float32, np.int64, np.float16]:
        x = ((np.arange(n) % 7) + rank).astype(dtype)
        ref = sum(((np.arange(n) % 7) + r).astype(np.float64) for r in range(size))
        res = hvd.allreduce(x, op=hvd.Sum, name="ar.%d.%s" % (n, np.dtype(dtype).name))
        tol = 1e-2 if dtype == np.float16 else 1e-6
        ok["allreduce.%d.%s" % (n, np.dtype(dtype).name)] = bool(np.allclose(res.astype(np.float64), ref, rtol=tol))
    mx = hvd.allreduce(np.full(n, rank, np.float32), op=hvd.Max, name="max.%d" % n)
    ok["max.%d" % n] = bool(np.all(mx == size - 1))
g = hvd.allgather(np.full((rank + 1, 3), rank, np.int32))
ok["allgather"] = g[:, 0].tolist() == [r for r in range(size) for _ in range(r + 1)]
big = np.full(300000, rank, np.float64)
ok["allgather_big"] = bool(np.all(hvd.allgather(big).reshape(size, -1)[:, 0] == np.arange(size)))
for root in range(size):
    b = hvd.broadcast(np.full(70000, rank, np.float32), root, name="bc.%d" % root)
    ok["bcast.%d" % root] = bool(np.all(b == root))
a, rs = hvd.alltoall(np.repeat(np.arange(size, dtype=np.int32), 2 + rank), splits=[2 + rank] * size)
ok["alltoall"] = a.tolist() == [rank] * sum(2 + s for s in range(size)) and rs.tolist() == [2 + s for s in range(size)]
r = hvd.reducescatter(np.ones((size * 3 + 1, 4), np.float32), op=hvd.Sum)
ok["reducescatter"] = bool(np.all(r == size)) and r.shape[0] == 3 + (1 if rank == 0 else 0)
hvd.barrier()
out["ok"] = ok
print(json.dumps(out))
'''


def _run(tmp_path, np_, expected_transport, env=None, **kwargs):
    # Rank 0's timeline names each activity after the transport that ran it
    # (TCP_ALLREDUCE, SHM_ALLREDUCE, ...): proof of which one the job used.
    timeline = tmp_path / "timeline.json"
    results = ranks.run_ok(np_, BATTERY, env=dict(env or {}, HOROVOD_TIMELINE=str(timeline)), timeout=120,
                           **kwargs)
    activities = set(re.findall(r'"([A-Z]+)_ALLREDUCE"', timeline.read_text())) - {"NEGOTIATE"}
    assert activities == {expected_transport}, activities
    return results


def _check(results, expected_topology):
    for rank, res in enumerate(results):
        assert res["topology"] == expected_topology[rank], (rank, res["topology"])
        bad = [k for k, v in res["ok"].items() if not v]
        assert bad == [], "rank %d wrong: %s" % (rank, bad)


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_shared_memory_on_one_host(tmp_path, np_):
    _check(_run(tmp_path, np_, "SHM"), [[r, np_, 0, 1, True] for r in range(np_)])


@pytest.mark.parametrize("np_", [2, 3])
def test_tcp_only_when_shared_memory_is_disabled(tmp_path, np_):
    _check(_run(tmp_path, np_, "TCP", env={"HOROVOD_SHM_DISABLE": "1"}),
           [[r, np_, 0, 1, True] for r in range(np_)])


def test_hierarchical_two_hosts_two_ranks_each(tmp_path):
    hosts = ["hostA", "hostA", "hostB", "hostB"]
    _check(_run(tmp_path, 4, "HIERARCHICAL", hosts=hosts),
           [[0, 2, 0, 2, True], [1, 2, 0, 2, True], [0, 2, 1, 2, True], [1, 2, 1, 2, True]])


def test_heterogeneous_hosts_use_flat_tcp(tmp_path):
    # Hierarchical collectives need the same number of ranks on every host.
    hosts = ["hostA", "hostA", "hostB"]
    _check(_run(tmp_path, 3, "TCP", hosts=hosts),
           [[0, 2, 0, 2, False], [1, 2, 0, 1, False], [0, 1, 1, 2, False]])


def test_interface_list_takes_the_first_name_each_host_has():
    # HOROVOD_GLOO_IFACE is a list because hosts may name their NICs
    # differently; this host has only the second name.
    results = ranks.run_ok(2, '''
hvd.init()
print(json.dumps(hvd.allreduce(np.ones(2), op=hvd.Sum).tolist()))
''', hosts=["hostA", "hostB"], env={"HOROVOD_GLOO_IFACE": "nosuchif0, lo"})
    assert results == [[2.0, 2.0]] * 2


def test_an_interface_list_this_host_has_none_of_is_a_clear_error():
    results = ranks.run(2, '''
try:
    hvd.init()
    print("initialized")
except ValueError as e:
    print(json.dumps(str(e)))
''', env={"HOROVOD_GLOO_IFACE": "nosuchif0,nosuchif1"}, timeout=30)
    for res in results:
        error = json.loads(res.stdout.strip().splitlines()[-1])
        assert "none of the network interfaces 'nosuchif0,nosuchif1'" in error, error
        assert "HOROVOD_GLOO_IFACE" in error, error
        assert "lo" in error.split("interfaces with one: ", 1)[1].rstrip(")").split(", "), error
