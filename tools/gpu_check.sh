#!/usr/bin/env bash
# gpu_check.sh - on a machine with a CUDA GPU and PyTorch: builds hvd-core from
# this checkout (no install), runs hvd-torch's tests there (the CUDA ones are
# skipped elsewhere) and times CUDA allreduces through horovod.torch.
#
#   tools/gpu_check.sh [OUT_DIR]      # logs go to OUT_DIR (default: /tmp)
#   HVD_GPU_TESTS=cuda tools/gpu_check.sh   # only the tests matching pytest -k cuda
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-/tmp}"
PY="${PYTHON:-python3}"
BUILD="${HVD_GPU_BUILD_DIR:-/tmp/hvd-gpu-build}"

nvidia-smi -L
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())"
cmake -S "$ROOT/packages/hvd-core" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log"
cmake --build "$BUILD" --target hvd_core >> "$OUT/cmake.log"
export HVD_CORE_LIBRARY="$BUILD/libhvd_core.so"
export PYTHONPATH="$ROOT/packages/hvd-core/python:$ROOT/packages/hvd-launch/src:$ROOT/packages/hvd-torch/src"

echo "== hvd-torch tests with a GPU present"
"$PY" -m pytest -q -p no:cacheprovider -rs ${HVD_GPU_TESTS:+-k "$HVD_GPU_TESTS"} "$ROOT/packages/hvd-torch/tests" 2>&1 | tee "$OUT/torch_tests.log" | tail -15

echo "== CUDA allreduce through horovod.torch (host staging), P=2 on one GPU"
cat > "$BUILD/cuda_allreduce_timing.py" <<'EOF'
import time
import torch
import horovod.torch as hvd

hvd.init()
device = torch.device("cuda", 0)
rows = []
for nbytes in (4, 1 << 20, 16 << 20, 64 << 20):
    x = torch.ones(max(1, nbytes // 4), device=device)
    for _ in range(3):
        hvd.allreduce_(x, op=hvd.Sum, name="t%d" % nbytes)
    times = []
    for _ in range(20 if nbytes > (1 << 20) else 200):
        torch.cuda.synchronize()
        start = time.perf_counter()
        hvd.allreduce_(x, op=hvd.Sum, name="t%d" % nbytes)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    median = sorted(times)[len(times) // 2]
    rows.append((nbytes, median * 1e6, nbytes / median * 2 * (hvd.size() - 1) / hvd.size() / 1e9))
if hvd.rank() == 0:
    print("| bytes | median us | busbw GB/s |")
    for nbytes, us, bw in rows:
        print("| %d | %.1f | %.2f |" % (nbytes, us, bw))
EOF
"$PY" -m horovod.runner -np 2 "$PY" "$BUILD/cuda_allreduce_timing.py" 2>&1 | tee "$OUT/cuda_timing.log" | tail -6
