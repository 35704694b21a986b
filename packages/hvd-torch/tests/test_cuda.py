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


@pytest.mark.parametrize("size,mode", list(MODES))
def test_every_collective_and_dtype_on_cuda_equals_the_cpu_engine(size, mode):
    reports = torch_ranks.run_program_ok(size, "cuda:every_collective_matches_the_cpu_engine", timeout=300,
                                         kwargs={"expect_transport": EXPECTED_TRANSPORT[mode]}, **MODES[(size, mode)])
    failures = {k: v for report in reports for k, v in report.items() if v is not None}
    assert not failures, json.dumps(failures, indent=1)[:6000]
    # Every check ran: 14 per integer dtype, 15 per float, 11 for bool, and the transport.
    assert len(reports[0]) >= 5 * 14 + 4 * 15 + 11 + 1, sorted(reports[0])


@pytest.mark.parametrize("size,mode", [(1, "nccl"), (2, "nccl")])
def test_distributed_optimizer_on_cuda_trains_as_on_the_cpu(size, mode):
    reports = torch_ranks.run_program_ok(size, "cuda:training_matches_the_cpu", timeout=300, **MODES[(size, mode)])
    for rank, report in enumerate(reports):
        assert report and all(report.values()), "rank %d: %s" % (rank, report)


def test_a_killed_rank_ends_the_nccl_collective_its_peer_waits_in():
    kwargs = dict(NCCL_TWO_RANKS)
    kwargs["env"] = dict(kwargs["env"], HOROVOD_PEER_TIMEOUT_SECONDS="3")
    results = torch_ranks.run_program(2, "cuda:rank_1_dies_inside_nccl", timeout=120, **kwargs)
    assert results[1].returncode == -9, str(results[1])
    assert results[0].returncode == 0, str(results[0])
    report = results[0].last_json()
    assert report["outcome"] != "completed" and report["later"] != "completed", report
    assert report["elapsed"] < 15, report
