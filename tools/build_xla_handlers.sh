#!/usr/bin/env bash
# build_xla_handlers.sh - builds hvd-tensorflow's XLA FFI handlers
# (packages/hvd-tensorflow/src/xla_ffi_handlers.cc) without TensorFlow, as
# exported C symbols (hvd_xla_<collective>_host / _cuda) in
# OUT_DIR/libhvd_xla_handlers.so, for any XLA runtime to register: the
# JAX-driven check of the CUDA handlers (test_xla_handlers_jax.py) on GPU
# machines that have jax but no CUDA build of TensorFlow.
#
#   tools/build_xla_handlers.sh OUT_DIR [HVD_CORE_LIBRARY]
#
# Needs: g++, Abseil's status library (Debian/Ubuntu: libabsl-dev), XLA's FFI
# headers (jax's jax.ffi.include_dir(), else TensorFlow's include folder, else
# XLA_FFI_INCLUDE). libhvd_core.so defaults to horovod.common's. The Abseil
# libraries are copied next to the result, so the folder can travel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: build_xla_handlers.sh OUT_DIR [HVD_CORE_LIBRARY]}"
PY="${PYTHON:-python3}"
CORE="${2:-$("$PY" -c 'from horovod.common import config; print(config.get_library_path())')}"
FFI="${XLA_FFI_INCLUDE:-$("$PY" -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null ||
  "$PY" -c 'import tensorflow as tf; print(tf.sysconfig.get_include())')}"
[[ -f "$FFI/xla/ffi/api/ffi.h" ]] || { echo "no xla/ffi/api/ffi.h under $FFI" >&2; exit 1; }
mkdir -p "$OUT"
# Only XLA's FFI headers (self-contained): TensorFlow's include folder also
# holds its own Abseil headers, which must not shadow the Abseil linked here.
mkdir -p "$OUT/include/xla/ffi/api"
cp "$FFI"/xla/ffi/api/*.h "$OUT/include/xla/ffi/api/"
FFI="$OUT/include"
cp "$CORE" "$OUT/" 2>/dev/null || true
g++ -shared -fPIC -O2 -std=c++17 -fvisibility=hidden -DHVD_XLA_FFI_EXPORTED_HANDLERS -DHVD_TF_GPU=1 \
  -I "$ROOT/packages/hvd-core/include" -I "$ROOT/packages/hvd-tensorflow/src" -isystem "$FFI" \
  "$ROOT/packages/hvd-tensorflow/src/xla_ffi_handlers.cc" "$ROOT/packages/hvd-tensorflow/src/core_calls.cc" \
  -o "$OUT/libhvd_xla_handlers.so" -L "$(dirname "$CORE")" -lhvd_core $(pkg-config --libs absl_status) \
  -Wl,-rpath,'$ORIGIN' -Wl,--disable-new-dtags -Wl,--no-undefined
# The Abseil libraries it needs, beside it ($ORIGIN), for machines without them.
ldd "$OUT/libhvd_xla_handlers.so" | awk '/libabsl_/ {print $3}' | xargs -r -I{} cp -L {} "$OUT/"
echo "$OUT/libhvd_xla_handlers.so"
