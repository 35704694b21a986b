#!/usr/bin/env bash
# dev_build_tf.sh - development build of hvd-tensorflow's native libraries
# without pip: configures packages/hvd-tensorflow with CMake in BUILD_DIR,
# builds the given targets (default: all) and copies the results next to the
# Python sources, so PYTHONPATH=packages/hvd-core/python:packages/hvd-tensorflow/python
# imports them. PYTHON (default: python3) must have TensorFlow installed and
# import horovod.common (set HVD_CORE_LIBRARY for a dev build of the core).
#   tools/dev_build_tf.sh /tmp/tf-build hvd_tensorflow
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:?usage: dev_build_tf.sh BUILD_DIR [target ...]}"
shift
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD/packages/hvd-core/python${PYTHONPATH:+:$PYTHONPATH}"
cmake -S packages/hvd-tensorflow -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$(command -v "$PYTHON")" >/dev/null
targets=("$@")
(( ${#targets[@]} )) || targets=(all)
for t in "${targets[@]}"; do
  cmake --build "$BUILD_DIR" --target "$t" -j "${HVD_JOBS:-2}"
done
dest=packages/hvd-tensorflow/python/horovod/tensorflow
# Copy, then rename: a process that has the old library mapped keeps it
# (overwriting a mapped library in place crashes that process).
place() { cp "$1" "$dest/.$(basename "$1").tmp" && mv -f "$dest/.$(basename "$1").tmp" "$dest/$(basename "$1")"; }
place "$BUILD_DIR/_build_info.py"
for t in "${targets[@]}"; do
  if [[ $t == all ]]; then
    for lib in "$BUILD_DIR"/lib*.so; do place "$lib"; done
  else
    place "$BUILD_DIR/lib$t.so"
  fi
done
