#!/usr/bin/env bash
# One call on a machine with an H200: build (unless BUILD_DIR already holds the
# binaries), run every GPU test, compute-sanitizer (memcheck, racecheck,
# synccheck) over the GPU tests, the demo and the benchmark. Logs and CSV go
# to $OUT (default ./gpu-check-out); a summary is printed last.
#
#   scripts/gpu_check.sh [--quick]      --quick: tests + sanitizers only
# Environment: BUILD_DIR, OUT, SANITIZER_FILTER, BENCH_ARGS, SKIP_PYTHON=1,
# PYTHON_TESTS (pytest paths, default tests/python), SHARDS (GPU test
# processes at once, default 8), SANITIZERS (default
# "memcheck racecheck synccheck"), SANITIZER_TIMEOUT (seconds a tool, 0: none).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
BUILD_DIR=${BUILD_DIR:-build}
SANITIZER_FILTER=${SANITIZER_FILTER:-"-*BitwiseIdentical*:*ManyTokens*:*BatchInvariance*"}
BENCH_ARGS=${BENCH_ARGS:-}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$summary"

if [ ! -x "$BUILD_DIR/tests/sparse_decode_gpu_tests" ]; then
  cmake --preset release -DSPARSE_DECODE_RESOURCE_USAGE=ON > "$OUT/build.log" 2>&1 &&
    cmake --build build -j16 >> "$OUT/build.log" 2>&1
  note "build: rc=$?"
  BUILD_DIR=build
fi
export LD_LIBRARY_PATH="$PWD/$BUILD_DIR:${LD_LIBRARY_PATH:-}"
tests="$BUILD_DIR/tests/sparse_decode_gpu_tests"

# The tests in SHARDS processes at once (default 8): the fp64 reference on the
# CPU dominates their time, and the machine has 16 cores.
shards=${SHARDS:-8}
rc=0
for ((i = 0; i < shards; ++i)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$tests" > "$OUT/gpu_tests_$i.log" 2>&1 &
done
for job in $(jobs -p); do wait "$job" || rc=1; done
cat "$OUT"/gpu_tests_*.log > "$OUT/gpu_tests.log" && rm -f "$OUT"/gpu_tests_*.log
grep -E "^\[  FAILED  \] [A-Z]|Failure" "$OUT/gpu_tests.log" | head -40
note "gpu tests: rc=$rc ($(grep -c '^\[       OK' "$OUT/gpu_tests.log") ok, $(grep -c '^\[  FAILED  \] [A-Z]' "$OUT/gpu_tests.log") failed)"

for tool in ${SANITIZERS:-memcheck racecheck synccheck}; do
  # synccheck's automatic count of tracked barriers overflows on the 64-head
  # split tests ("Detected overflow of tracked cuda::barrier structures", then
  # a launch failure): track 16384 (docs/kernels/small_batch.md).
  extra=()
  [ "$tool" = synccheck ] && extra=(--num-cuda-barriers 16384)
  timeout "${SANITIZER_TIMEOUT:-0}" compute-sanitizer --tool "$tool" ${extra[@]+"${extra[@]}"} --error-exitcode 9 "$tests" --gtest_filter="$SANITIZER_FILTER" \
    > "$OUT/sanitizer_$tool.log" 2>&1
  note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)"
done
cat "$OUT"/sanitizer_*.log > "$OUT/sanitizer.log" 2>/dev/null && rm -f "$OUT"/sanitizer_*.log

# The Python package, built where it runs (the machine's python3, torch and
# nanobind; no network), then its tests: GPU ones included.
# A carried build-python/site (scripts/build_python_for_device.sh) is used as it is.
if [ -f pyproject.toml ] && [ "${SKIP_PYTHON:-0}" != 1 ]; then
  : > "$OUT/python_tests.log"
  if [ ! -d build-python/site/sparse_decode ]; then
    PATH=/usr/local/cuda/bin:$PATH python3 -m pip install --no-build-isolation --no-deps -q --upgrade \
      --target build-python/site . >> "$OUT/python_tests.log" 2>&1
  fi
  # shellcheck disable=SC2086
  PYTHONPATH=$PWD/build-python/site python3 -m pytest -q -rs ${PYTHON_TESTS:-tests/python} >> "$OUT/python_tests.log" 2>&1
  note "python tests: rc=$? $(grep -E '(passed|failed)' "$OUT/python_tests.log" | tail -1)"
fi

if [ "${1:-}" != "--quick" ] && [ -x "$BUILD_DIR/tools/sparse-decode" ]; then
  "$BUILD_DIR/tools/sparse-decode" demo > "$OUT/demo.log" 2>&1
  note "demo: rc=$?"; tail -5 "$OUT/demo.log"
  # shellcheck disable=SC2086
  "$BUILD_DIR/tools/sparse-decode" bench --csv "$OUT/bench.csv" $BENCH_ARGS > "$OUT/bench.log" 2>&1
  note "bench: rc=$?"; cat "$OUT/bench.log" | tail -30
fi
echo "==== summary"; cat "$summary"
