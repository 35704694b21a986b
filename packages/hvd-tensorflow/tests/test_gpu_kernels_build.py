# test_gpu_kernels_build.py - the GPU half of hvd-tensorflow (GPU kernels and
# XLA's "CUDA" handlers, HVD_TF_GPU) compiled against the installed
# TensorFlow and loaded into it. A CUDA build of TensorFlow turns them on by
# itself; here they are forced on, so they compile, register and load even
# where TensorFlow is a CPU build (which never runs them: the GPU run is
# tools/gpu_check.sh's, the XLA handlers through JAX).
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                                reason="needs cmake and ninja")


@pytest.fixture(scope="module")
def gpu_build(tmp_path_factory):
    build = tmp_path_factory.mktemp("tf-gpu-build")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    configure = subprocess.run(
        ["cmake", "-S", os.path.join(ROOT, "packages", "hvd-tensorflow"), "-B", str(build), "-G", "Ninja",
         "-DCMAKE_BUILD_TYPE=Release", "-DPython_EXECUTABLE=" + sys.executable, "-DHVD_TF_GPU=ON"],
        capture_output=True, text=True, env=env, timeout=300)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    assert "building the GPU kernels" in configure.stdout
    compiled = subprocess.run(["cmake", "--build", str(build), "-j", os.environ.get("HVD_JOBS", "2")],
                              capture_output=True, text=True, env=env, timeout=900)
    assert compiled.returncode == 0, compiled.stdout[-4000:] + compiled.stderr[-4000:]
    return build


def test_gpu_kernels_register_with_their_host_memory_arguments(gpu_build):
    # Loaded in a fresh process: the package's own libraries (CPU kernels of
    # the same ops) must not be loaded beside them.
    probe = textwrap.dedent("""
        import json, os, sys
        import tensorflow as tf
        from horovod.common import c_api
        c_api.lib()  # libhvd_core, which the op libraries link
        tf.load_op_library(sys.argv[1] + "/libhvd_tensorflow.so")
        xla = sys.argv[1] + "/libhvd_tensorflow_xla.so"
        if os.path.exists(xla):
            tf.load_library(xla)
        from tensorflow.python.framework import kernels
        report = {}
        for op in ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
                   "HorovodBroadcast", "HorovodBroadcastInplaceResource", "HorovodReducescatter",
                   "HorovodGroupedReducescatter", "HorovodAlltoall", "HorovodJoin", "HorovodSize",
                   "HorovodLocalSize", "HorovodRank", "HorovodLocalRank", "HorovodProcessSetIncluded"]:
            report[op] = {k.device_type: sorted(k.host_memory_arg)
                          for k in kernels.get_registered_kernels_for_op(op).kernel}
        print(json.dumps({"kernels": report, "xla": os.path.exists(xla)}))
    """)
    out = subprocess.run([sys.executable, "-c", probe, str(gpu_build)], capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    kernels = result["kernels"]
    for op, devices in kernels.items():
        assert set(devices) == {"CPU", "GPU"}, (op, devices)
        assert devices["CPU"] == [], (op, devices)
    assert kernels["HorovodAlltoall"]["GPU"] == ["received_splits", "splits"]
    for op in ("HorovodJoin", "HorovodSize", "HorovodLocalSize", "HorovodRank", "HorovodLocalRank",
               "HorovodProcessSetIncluded"):
        assert kernels[op]["GPU"] == ["output"], (op, kernels[op])
    for op in ("HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast", "HorovodReducescatter"):
        assert kernels[op]["GPU"] == [], (op, kernels[op])
    # The XLA library, with its CUDA handlers registered, loads beside them.
    build_info = open(os.path.join(str(gpu_build), "_build_info.py")).read()
    assert "GPU_KERNELS_BUILT = True" in build_info
    assert result["xla"] == ("XLA_BUILT = True" in build_info)
