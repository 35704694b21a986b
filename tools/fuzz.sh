#!/usr/bin/env bash
# tools/fuzz.sh [seconds-per-target] - builds hvd-core's libFuzzer targets
# with clang into build/fuzz and runs each for the given time (default 60 s)
# on a corpus seeded by the encoders (build/fuzz/corpus/<target>, kept between
# runs). Prints the executions each target ran clean; a crash stops with the
# failing input saved as build/fuzz/crash-<target>-*.
# The Python store's target (tests/fuzz/fuzz_rendezvous.py, atheris) runs too
# when HVD_FUZZ_PYTHON names a Python that has atheris and numpy; its seeds
# are the requests in tests/fuzz/corpus/rendezvous.
# HVD_FUZZ_TARGETS="handshake c_api" runs only those targets.
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build/fuzz"

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
CC=clang CXX=clang++ cmake -S "$root/packages/hvd-core" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DHVD_WITH_CUDA=OFF -DHVD_BUILD_FUZZERS=ON >/dev/null
read -r -a targets <<< "${HVD_FUZZ_TARGETS:-message http_response control_channel handshake c_api rendezvous}"
native=()
for t in "${targets[@]}"; do [[ $t == rendezvous ]] || native+=("fuzz_$t"); done
cmake --build "$build" -j "${HVD_FUZZ_JOBS:-2}" --target "${native[@]}" fuzz_seeds

for t in message http_response control_channel handshake c_api rendezvous; do mkdir -p "$build/corpus/$t"; done
"$build/tests/fuzz/fuzz_seeds" "$build/corpus"
cp "$root/packages/hvd-core/tests/fuzz/corpus/rendezvous/"* "$build/corpus/rendezvous/"

declare -A runs
status=0
for t in "${targets[@]}"; do
  log="$build/fuzz_$t.log"
  cmd=("$build/tests/fuzz/fuzz_$t")
  if [[ $t == rendezvous ]]; then
    if [[ -z "${HVD_FUZZ_PYTHON:-}" ]]; then
      runs[$t]="skipped (set HVD_FUZZ_PYTHON to a Python with atheris)"
      continue
    fi
    cmd=(env PYTHONPATH="$root/packages/hvd-core/python" "$HVD_FUZZ_PYTHON"
         "$root/packages/hvd-core/tests/fuzz/fuzz_rendezvous.py" -max_len=4096)
  fi
  echo "fuzz.sh: fuzz_$t for ${seconds}s (log: $log)"
  if "${cmd[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -artifact_prefix="$build/crash-$t-" "$build/corpus/$t" >"$log" 2>&1; then
    # libFuzzer's last line: "Done N runs in S second(s)".
    runs[$t]="$(grep -o 'Done [0-9]* runs' "$log" | tail -1 | awk '{print $2}')"
  else
    runs[$t]="FAILED (see $log)"
    status=1
  fi
done
echo
echo "executions run clean in ${seconds}s per target:"
for t in "${targets[@]}"; do printf '  fuzz_%-16s %s\n' "$t" "${runs[$t]}"; done
exit $status
