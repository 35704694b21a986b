# test_xla_handlers_jax.py - hvd-tensorflow's XLA FFI handlers on the host
# and on a CUDA GPU, driven by JAX's XLA runtime (rank_programs/
# xla_handlers_jax.py). TensorFlow's own XLA runs these handlers inside
# tf.function(jit_compile=True); a CUDA build of TensorFlow is rarely at hand
# where a GPU is, JAX's XLA often is, and XLA's FFI is the same C ABI in both.
#
# Needs the handlers built as exported symbols (tools/build_xla_handlers.sh
# writes libhvd_xla_handlers.so) named by HVD_XLA_HANDLERS_LIBRARY, and jax;
# the CUDA cases need jax with a GPU and hvd-core's CUDA plugin.
# tools/gpu_check.sh runs them; elsewhere they are skipped.
import functools
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from horovod.common import testing

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.environ.get("HVD_XLA_HANDLERS_LIBRARY", "")

pytestmark = pytest.mark.skipif(not (os.path.exists(LIBRARY) and importlib.util.find_spec("jax")),
                                reason="needs jax and HVD_XLA_HANDLERS_LIBRARY (tools/build_xla_handlers.sh)")


@functools.lru_cache(maxsize=None)
def _jax_has_gpu():
    probe = "import jax; print(len(jax.devices('gpu')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false"))
    return out.returncode == 0 and out.stdout.strip() not in ("", "0")


# Two ranks on one GPU: each its own NCCL_HOSTID, so NCCL runs between them
# (over loopback sockets) instead of hvd staging through host memory.
NCCL_TWO_RANKS = dict(env={"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"},
                      rank_env_overrides={0: {"NCCL_HOSTID": "hvd-xla-0"}, 1: {"NCCL_HOSTID": "hvd-xla-1"}})
CASES = {
    "host-2": ("cpu", 2, None, {}),
    "cuda-1": ("cuda", 1, "NCCL_ALLREDUCE", {}),
    "cuda-2-nccl": ("cuda", 2, "NCCL_ALLREDUCE", NCCL_TWO_RANKS),
    "cuda-2-staged": ("cuda", 2, "STAGED_ALLREDUCE", {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_xla_handler_matches_numpy(case):
    platform, size, transport, launch = CASES[case]
    if platform == "cuda" and not _jax_has_gpu():
        pytest.skip("jax sees no GPU")
    env = dict(launch.get("env", {}), XLA_PYTHON_CLIENT_PREALLOCATE="false")
    reports = testing.run_program_ok(size, "rank_programs.xla_handlers_jax:every_handler_matches_numpy",
                                     path=HERE, timeout=240, env=env,
                                     rank_env_overrides=launch.get("rank_env_overrides"),
                                     kwargs={"platform": platform, "library": LIBRARY,
                                             "expect_transport": transport})
    failures = {"rank %d: %s" % (r, k): v for r, rep in enumerate(reports) for k, v in rep.items() if v != "ok"}
    assert not failures, json.dumps(failures, indent=1)[:6000]
    assert len(reports[0]) == 10, sorted(reports[0])
