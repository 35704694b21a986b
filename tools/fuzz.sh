#!/usr/bin/env bash
# tools/fuzz.sh [seconds-per-target] - builds hvd-core's libFuzzer targets
# with clang into build/fuzz and runs each for the given time (default 60 s)
# on a corpus seeded by the encoders (build/fuzz/corpus/<target>, kept between
# runs). Prints the executions each target ran clean; a crash stops with the
# failing input saved as build/fuzz/crash-<target>-*.
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
cmake --build "$build" -j "${HVD_FUZZ_JOBS:-2}" --target fuzz_message fuzz_http_response fuzz_control_channel fuzz_seeds

targets=(message http_response control_channel)
for t in "${targets[@]}"; do mkdir -p "$build/corpus/$t"; done
"$build/tests/fuzz/fuzz_seeds" "$build/corpus"

declare -A runs
status=0
for t in "${targets[@]}"; do
  log="$build/fuzz_$t.log"
  echo "fuzz.sh: fuzz_$t for ${seconds}s (log: $log)"
  if "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
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
