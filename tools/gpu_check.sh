#!/usr/bin/env bash
# gpu_check.sh - on a machine with an NVIDIA GPU and a CUDA build of PyTorch:
# builds hvd-core with its CUDA plugin from this checkout (no install), runs
# every CUDA test (hvd-torch's test_cuda.py and the CUDA checks of
# test_collectives.py: kernels against the CPU engine on random data for
# every dtype, every collective at 1 and 2 ranks over NCCL and staged
# through host memory, DistributedOptimizer training, a killed rank;
# hvd-tensorflow's XLA handlers on the GPU through JAX's XLA when jax is
# there) and the GPU benchmarks (tools/gpu_benchmark.py). Logs go to OUT_DIR.
#
#   tools/gpu_check.sh [OUT_DIR]               # default OUT_DIR: /tmp
#   HVD_GPU_PREBUILT=dir tools/gpu_check.sh    # use libhvd_core.so + libhvd_core_cuda.so from dir
#                                              # (and libhvd_xla_handlers.so, when there)
#   HVD_GPU_TESTS=expr tools/gpu_check.sh      # only the tests matching pytest -k expr
#   HVD_GPU_SKIP_BENCH=1 tools/gpu_check.sh    # tests only
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-/tmp}"
PY="${PYTHON:-python3}"
BUILD="${HVD_GPU_BUILD_DIR:-/tmp/hvd-gpu-build}"
status=0

nvidia-smi -L
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())"
if [[ -n "${HVD_GPU_PREBUILT:-}" ]]; then
  LIBDIR="$(cd "$HVD_GPU_PREBUILT" && pwd)"
else
  # Only this machine's GPU architecture: the build is a check, not a wheel.
  arch="$("$PY" -c "import torch; p = torch.cuda.get_device_capability(); print('%d%d-real' % p)")"
  cmake -S "$ROOT/packages/hvd-core" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" > "$OUT/cmake.log" 2>&1 &&
    cmake --build "$BUILD" >> "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  LIBDIR="$BUILD"
fi
export HVD_CORE_LIBRARY="$LIBDIR/libhvd_core.so"
export PYTHONPATH="$ROOT/packages/hvd-core/python:$ROOT/packages/hvd-launch/src:$ROOT/packages/hvd-torch/src"
export PYTHONUNBUFFERED=1
"$PY" -c "from horovod.common import c_api; print('hvd GPU support:', c_api.gpu_info())"

# hvd-tensorflow's XLA FFI handlers, run by JAX's XLA on the GPU (a CUDA
# build of TensorFlow is seldom installed where the GPU is; jax often is).
if [[ -z "${HVD_XLA_HANDLERS_LIBRARY:-}" ]]; then
  if [[ -f "$LIBDIR/libhvd_xla_handlers.so" ]]; then
    export HVD_XLA_HANDLERS_LIBRARY="$LIBDIR/libhvd_xla_handlers.so"
  elif "$PY" -c "import jax" 2>/dev/null && pkg-config --exists absl_status 2>/dev/null; then
    bash "$ROOT/tools/build_xla_handlers.sh" "$BUILD/xla" "$HVD_CORE_LIBRARY" > "$OUT/xla_handlers_build.log" 2>&1 &&
      export HVD_XLA_HANDLERS_LIBRARY="$BUILD/xla/libhvd_xla_handlers.so"
  fi
fi
echo "XLA handlers for the JAX check: ${HVD_XLA_HANDLERS_LIBRARY:-not built (needs jax and libabsl-dev)}"

echo "== CUDA tests"
"$PY" -m pytest -q -p no:cacheprovider -rfEs --timeout=400 -k "${HVD_GPU_TESTS:-cuda}" \
  "$ROOT/packages/hvd-torch/tests/test_cuda.py" "$ROOT/packages/hvd-torch/tests/test_collectives.py" \
  "$ROOT/packages/hvd-tensorflow/tests/test_xla_handlers_jax.py" \
  2>&1 | tee "$OUT/cuda_tests.log" | tail -40 || status=1

if [[ -z "${HVD_GPU_SKIP_BENCH:-}" ]]; then
  echo "== kernels: batched copy/scale vs device copy"
  "$PY" "$ROOT/tools/gpu_benchmark.py" kernels --json "$OUT/bench_kernels.json" 2>&1 | tee "$OUT/bench_kernels.log" || status=1
  for np in 1 2; do
    echo "== allreduce: hvd vs torch.distributed NCCL, np=$np"
    "$PY" "$ROOT/tools/gpu_benchmark.py" allreduce --np $np --json "$OUT/bench_allreduce_np$np.json" 2>&1 \
      | tee "$OUT/bench_allreduce_np$np.log" || status=1
  done
fi
exit $status
