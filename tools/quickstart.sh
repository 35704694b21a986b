#!/usr/bin/env bash
# quickstart.sh - sets up a virtual environment with hvd (engine, launcher,
# PyTorch binding on the CPU build of torch) and runs a real 2-process
# data-parallel training job on the CPU: Horovod's MNIST recipe on synthetic
# MNIST-shaped data.
# Usage: tools/quickstart.sh [-np N]
set -euo pipefail
cd "$(dirname "$0")/.."
NP=2
if [[ "${1:-}" == "-np" && -n "${2:-}" ]]; then NP="$2"; fi
VENV="${HVD_VENV:-.venv}"

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install -q --disable-pip-version-check numpy "scikit-build-core>=0.11" "setuptools>=77" wheel PyYAML cloudpickle
# --no-build-isolation: build with the scikit-build-core just installed and
# the machine's cmake, instead of downloading a fresh build environment.
# torch pinned: an unpinned torch downloads GBs of CUDA packages.
python -m pip install -q --disable-pip-version-check torch==2.13.0
python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  ./packages/hvd-core ./packages/hvd-launch ./packages/hvd-torch

echo "== horovodrun -np $NP python examples/pytorch/pytorch_mnist.py"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" exec horovodrun -np "$NP" python examples/pytorch/pytorch_mnist.py
