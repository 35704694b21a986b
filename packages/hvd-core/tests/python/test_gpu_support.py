# test_gpu_support.py - the host side of the GPU data plane, on any machine:
# what hvd-core reports about its CUDA plugin and NCCL, and the errors for
# CUDA tensors, bad GPU knobs and a missing or wrong NCCL. The GPU itself is
# exercised by hvd-torch's test_cuda.py on a machine that has one
# (tools/gpu_check.sh). What the ranks run is in rank_programs/gpu_support.py;
# the knob checks only call hvd.init(), inline.
import os

import pytest

import ranks


def _plugin_path():
    from horovod.common import config
    return os.path.join(os.path.dirname(config.get_library_path()), "libhvd_core_cuda.so")


def _gpu_info(env):
    return ranks.run_program_ok(1, "gpu_support:gpu_info", env=env)[0]


def test_cuda_built_says_whether_the_plugin_is_installed_next_to_the_library():
    info = _gpu_info({})
    assert info["cuda_built"] == os.path.exists(_plugin_path()), info
    if not info["cuda_available"]:
        # No GPU here: the reason is spelled out (no driver, no device, no plugin).
        assert info["device_count"] == 0 and info["message"], info


def test_a_missing_cuda_plugin_is_reported_by_path():
    info = _gpu_info({"HVD_CUDA_PLUGIN": "/nonexistent/libhvd_core_cuda.so"})
    assert not info["cuda_built"] and not info["cuda_available"] and info["nccl_version"] == 0, info
    assert "no usable CUDA plugin" in info["message"] and "/nonexistent/libhvd_core_cuda.so" in info["message"]


needs_plugin = pytest.mark.skipif(not os.path.exists(_plugin_path()), reason="hvd-core built without its CUDA plugin")


@needs_plugin
def test_nccl_from_a_missing_file_is_reported_with_the_way_to_fix_it():
    info = _gpu_info({"HVD_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    assert info["cuda_built"] and info["nccl_version"] == 0, info
    assert "cannot load NCCL" in info["message"] and "/nonexistent/libnccl.so.2" in info["message"], info
    assert "HVD_NCCL_LIBRARY" in info["message"], info


@needs_plugin
def test_a_library_that_is_not_nccl_is_refused_naming_what_it_lacks():
    from horovod.common import config
    info = _gpu_info({"HVD_NCCL_LIBRARY": config.get_library_path()})  # a real library, but not NCCL
    assert info["nccl_version"] == 0, info
    assert "is not a usable NCCL" in info["message"] and "ncclAllReduce" in info["message"], info


def test_a_cuda_tensor_without_a_usable_gpu_is_refused_with_the_reason():
    info = _gpu_info({})
    if info["cuda_available"]:
        pytest.skip("this machine has a GPU hvd can use")
    results = ranks.run_program(1, "gpu_support:enqueue_on_device",
                                kwargs={"device_type": 2, "name": "allreduce.gpu"})  # kDLCUDA
    assert results[0].returncode == 0, results[0]
    error = results[0].last_json()["error"]
    assert error and "HorovodUnsupportedError" in error and "is a CUDA tensor, but" in error, error
    assert info["message"].split(";")[0] in error, (error, info)


def test_a_tensor_on_another_device_type_names_it():
    results = ranks.run_program(1, "gpu_support:enqueue_on_device",
                                kwargs={"device_type": 14, "name": "allreduce.oneapi"})  # kDLOneAPI
    error = results[0].last_json()["error"]
    assert error and "DLPack device type 14" in error and "CPU and CUDA" in error, error


@pytest.mark.parametrize("knob", ["HOROVOD_GPU_OPERATIONS", "HOROVOD_GPU_ALLREDUCE", "HOROVOD_GPU_ALLTOALL"])
def test_an_unknown_gpu_operations_value_fails_init_on_every_rank(knob):
    results = ranks.run(2, "hvd.init()\n", env={knob: "RCCL"})
    for res in results:
        assert res.returncode != 0, res
        assert knob + "=RCCL is not supported; use NCCL, or MPI / GLOO" in res.stderr, res


def test_gpu_operations_values_horovod_accepts_start_the_engine():
    results = ranks.run_program_ok(2, "gpu_support:allreduce_after_init", env={
        "HOROVOD_GPU_OPERATIONS": "nccl", "HOROVOD_GPU_ALLGATHER": "MPI", "HOROVOD_GPU_BROADCAST": "gloo"})
    assert results == [[2.0, 2.0], [2.0, 2.0]]
