#!/usr/bin/env bash
# One call on a machine with an H200: build (unless BUILD_DIR already holds the
# binaries), run every GPU test, the metadata fuzzer, compute-sanitizer
# (memcheck, racecheck, synccheck) over the GPU tests with the reproducers of
# the expected reports, the demo and the benchmark. Logs and CSV go to $OUT
# (default ./gpu-check-out); a summary is printed last, ending with a verdict
# (exit status 1 when the GPU or Python tests, the fuzzer, its host-metadata
# check, the sanitizers or the demo fail; the bench informs).
#
#   scripts/gpu_check.sh [--quick]      --quick: tests, fuzzer, sanitizers only
# Environment: BUILD_DIR, OUT, GPU_TEST_FILTER (gtest filter of the GPU tests,
# default all), SANITIZER_FILTER, BENCH_ARGS, SKIP_PYTHON=1,
# PYTHON_TESTS (pytest paths, default tests/python), SHARDS (GPU test
# processes at once, default 8), SANITIZERS (default
# "memcheck racecheck synccheck"), SANITIZER_TIMEOUT (seconds a process, 0: none),
# SANITIZER_SHARDS (processes a tool, the tools at once, default 4), RACECHECK_FILTER (racecheck's
# tests), SYNCCHECK_EXCLUDE, SYNCCHECK_CLUSTER_TESTS and SYNCCHECK_ALONE_FILTER
# (what synccheck runs apart, below), FUZZ_CASES (cases an operation, default 100000), FUZZ_JOBS (fuzzer
# processes, default 16), FUZZ_SEED (replay a run), SKIP_FUZZ=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
BUILD_DIR=${BUILD_DIR:-build}
SANITIZER_FILTER=${SANITIZER_FILTER:-"-*BitwiseIdentical*:*ManyTokens*:*BatchInvariance*:*BatchInvariantFlagKeepsTokenBits*"}
RACECHECK_FILTER=${RACECHECK_FILTER:-"Dsv4Gpu.NoSinksNoLens:Dsv4Gpu.HeadCounts:Dsv4Gpu.SplitCombineAtEveryGroupCount:Dsv4Gpu.Bf16MaskedColumnsSinksAndPages:EveryKernel/Dsv4PackedGpuKernels.WithPdlAndWithoutLseOrCounter/*:Dsv4HcaGpu.SinkTerm:DsaGpu.BroadcastQuery:DsaGpu.AutoRunsTheDirectKernel:Shapes/DsaGpuCases.MatchesReferenceForEverySplit/case13_*:Shapes/DsaGpuStaged.MatchesReferenceForEverySplitAndRepeats/case3_*:Dsv4PackedGpu.StreamH64WithPdlAndWithoutLseOrCounter:Dsv4PackedGpu.SplitH64StridedPdlAndNoLse:MergeGpu.LargeAndTinyLse:Dsv4HcaConvertGpu.DeviceRefusesAsTheHostDoes:Batches/Dsv4HcaGpuPageWalk.EqualsSection1OnTheExpansion/case4"}
sanitizer_shards=${SANITIZER_SHARDS:-4}
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
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$tests" --gtest_filter="${GPU_TEST_FILTER:-*}" \
    > "$OUT/gpu_tests_$i.log" 2>&1 &
done
for job in $(jobs -p); do wait "$job" || rc=1; done
cat "$OUT"/gpu_tests_*.log > "$OUT/gpu_tests.log" && rm -f "$OUT"/gpu_tests_*.log
grep -E "^\[  FAILED  \] [A-Z]|Failure" "$OUT/gpu_tests.log" | head -40
note "gpu tests: rc=$rc ($(grep -c '^\[       OK' "$OUT/gpu_tests.log") ok, $(grep -c '^\[  FAILED  \] [A-Z]' "$OUT/gpu_tests.log") failed)"
failed=()
[ "$rc" = 0 ] || failed+=("gpu tests")

# The metadata fuzzer (tests/fuzz/README.md): FUZZ_CASES cases an operation
# over FUZZ_JOBS processes (the fp64 reference is its cost), seeds printed;
# then, apart, the refusal of inconsistent host-visible metadata.
fuzz="$BUILD_DIR/tests/fuzz/sparse_decode_fuzz"
if [ "${SKIP_FUZZ:-0}" != 1 ] && [ -x "$fuzz" ]; then
  fuzz_args=(--cases "${FUZZ_CASES:-100000}" --jobs "${FUZZ_JOBS:-16}")
  [ -n "${FUZZ_SEED:-}" ] && fuzz_args+=(--seed "$FUZZ_SEED")
  "$fuzz" "${fuzz_args[@]}" > "$OUT/fuzz.log" 2>&1
  frc=$?
  grep -E "^(FAIL|STOP|NAN-POLICY)" "$OUT/fuzz.log" | head -20
  note "fuzz: rc=$frc $(grep -m1 'base seed' "$OUT/fuzz.log" | sed 's/.*base seed \([0-9]*\).*/(base seed \1)/')"
  grep -E "^fuzz [a-z0-9]+:" "$OUT/fuzz.log" | sed 's/^/  /' | tee -a "$summary"
  [ "$frc" = 0 ] || failed+=("fuzz")
  "$fuzz" --host-metadata > "$OUT/fuzz_host_metadata.log" 2>&1
  hrc=$?
  note "fuzz host-metadata check: rc=$hrc $(tail -1 "$OUT/fuzz_host_metadata.log")"
  grep -E "^HOST-METADATA" "$OUT/fuzz_host_metadata.log" | head -12 | sed 's/^/  /' | tee -a "$summary"
  [ "$hrc" = 0 ] || failed+=("fuzz host-metadata")
else
  note "fuzz: not run (SKIP_FUZZ=1, or no $fuzz)"
fi

# The reproducers of the expected sanitizer reports (diagnostics/repro/).
repro_bin="$OUT/repro"
mkdir -p "$repro_bin"
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for src in diagnostics/repro/*.cu; do
  name=repro-$(basename "$src" .cu | tr _ -)
  "$nvcc_bin" -O2 -lineinfo -gencode=arch=compute_90a,code=sm_90a -o "$repro_bin/$name" "$src" \
    >> "$OUT/repro_build.log" 2>&1 || note "reproducer build failed: $name (see repro_build.log)"
done

summary_args=()
tools=(${SANITIZERS:-memcheck racecheck synccheck})
# synccheck's automatic count of tracked barriers overflows on the 64-head
# split tests ("Detected overflow of tracked cuda::barrier structures", then
# a launch failure): track 16384 (docs/kernels/small_batch.md).
tool_options() { if [ "$1" = synccheck ]; then echo "--num-cuda-barriers 16384"; fi; }
# synccheck stops a kernel at its first report, and the process's later
# tests then fail: the suite runs with the cluster kernels excluded
# (SYNCCHECK_EXCLUDE, a kernel-name substring; their expected report is the
# cluster-receive entry), and those kernels alone under each of
# SYNCCHECK_CLUSTER_TESTS, one process a test.
SYNCCHECK_EXCLUDE=${SYNCCHECK_EXCLUDE-cluster_kernel}
SYNCCHECK_CLUSTER_TESTS=${SYNCCHECK_CLUSTER_TESTS-"Dsv4Gpu.WidthsAndTokenCounts Dsv4Gpu.HolesAndShortLens Dsv4Gpu.HeadCounts Dsv4PackedGpu.SinkTermEveryKernel"}
# Tests whose every kernel synccheck checks, each in its own process, out of
# the shards: the DSA cluster fold's 16-CTA clusters past the first wave get
# the tool's cluster-divergent report, which stops the kernel (a gtest
# filter: the fold's own tests and the large case that kAuto folds).
SYNCCHECK_ALONE_FILTER=${SYNCCHECK_ALONE_FILTER-"Shapes/DsaGpuClusterFold.*:Shapes/DsaGpuBf16ClusterFold.*:Shapes/DsaGpuCases.*large*"}
# Every tool at once, SANITIZER_SHARDS processes each (gtest sharding); each
# must finish. racecheck runs the tests 100x slower or more: a small set that
# launches every kernel (RACECHECK_FILTER), the other tools the whole filter.
declare -A tool_jobs
for tool in ${tools[@]+"${tools[@]}"}; do
  filter=$SANITIZER_FILTER
  [ "$tool" = racecheck ] && filter=$RACECHECK_FILTER
  exclude=()
  [ "$tool" = synccheck ] && [ -n "$SYNCCHECK_EXCLUDE" ] && exclude=(--kernel-name-exclude "kns=$SYNCCHECK_EXCLUDE")
  alone=()
  if [ "$tool" = synccheck ] && [ -n "$SYNCCHECK_ALONE_FILTER" ]; then
    # shellcheck disable=SC2207
    alone=($("$tests" --gtest_filter="$SYNCCHECK_ALONE_FILTER" --gtest_list_tests |
      awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }'))
    case $filter in *-*) filter+=":$SYNCCHECK_ALONE_FILTER" ;; *) filter+="-$SYNCCHECK_ALONE_FILTER" ;; esac
  fi
  tool_jobs[$tool]=""
  # No more processes than tests: a process with no test makes no CUDA call,
  # which the tools report as an error.
  count=$("$tests" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ')
  tool_shards=$((count < sanitizer_shards ? count : sanitizer_shards))
  for ((i = 0; i < tool_shards; ++i)); do
    # shellcheck disable=SC2046
    GTEST_TOTAL_SHARDS=$tool_shards GTEST_SHARD_INDEX=$i timeout "${SANITIZER_TIMEOUT:-0}" \
      compute-sanitizer --tool "$tool" $(tool_options "$tool") ${exclude[@]+"${exclude[@]}"} --error-exitcode 9 \
      "$tests" --gtest_filter="$filter" > "$OUT/sanitizer_${tool}_$i.log" 2>&1 &
    tool_jobs[$tool]+=" $!"
  done
  if [ "$tool" = synccheck ] && [ -n "$SYNCCHECK_EXCLUDE" ]; then
    for test in $SYNCCHECK_CLUSTER_TESTS; do
      # shellcheck disable=SC2046
      timeout "${SANITIZER_TIMEOUT:-0}" compute-sanitizer --tool synccheck $(tool_options synccheck) \
        --kernel-name "kns=$SYNCCHECK_EXCLUDE" --error-exitcode 9 "$tests" --gtest_filter="$test" \
        > "$OUT/sanitizer_${tool}_$test.log" 2>&1 &
      tool_jobs[$tool]+=" $!"
    done
  fi
  for test in ${alone[@]+"${alone[@]}"}; do
    # shellcheck disable=SC2046
    timeout "${SANITIZER_TIMEOUT:-0}" compute-sanitizer --tool "$tool" $(tool_options "$tool") --error-exitcode 9 \
      "$tests" --gtest_filter="$test" > "$OUT/sanitizer_${tool}_${test//\//_}.log" 2>&1 &
    tool_jobs[$tool]+=" $!"
  done
done
for tool in ${tools[@]+"${tools[@]}"}; do
  # shellcheck disable=SC2207
  extra=($(tool_options "$tool"))
  trc=0
  for job in ${tool_jobs[$tool]}; do
    wait "$job"
    jrc=$?
    # 9: the tool found reports (sorted below); anything else but 0: the run itself failed (124: timeout).
    [ "$jrc" = 0 ] || [ "$jrc" = 9 ] || trc=$jrc
  done
  # A test that fails under the tool (a kernel it stopped, a broken context
  # after it) leaves the tests after it unchecked: the run is incomplete. A
  # test run alone may fail where the tool stopped its kernel at a report;
  # the summary below says whether each such report is expected.
  failed_line='^\[  FAILED  \] [A-Z].* \([0-9]+ ms\)$'
  tests_failed=$(cat "$OUT"/sanitizer_"${tool}"_[0-9]*.log | grep -cE "$failed_line")
  stopped=0
  for log in "$OUT"/sanitizer_"${tool}"_[A-Z]*.log; do
    [ -f "$log" ] && grep -qE "$failed_line" "$log" || continue
    if grep -qE 'ERROR SUMMARY: [1-9]' "$log"; then stopped=$((stopped + 1)); else tests_failed=$((tests_failed + 1)); fi
  done
  cat "$OUT"/sanitizer_"${tool}"_*.log > "$OUT/sanitizer_$tool.log" && rm -f "$OUT"/sanitizer_"${tool}"_*.log
  note "compute-sanitizer $tool: rc=$trc, $(grep -c '^\[       OK' "$OUT/sanitizer_$tool.log") tests ok, $tests_failed failed, ${stopped} run alone and stopped at a report, $(grep -cE 'ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]' "$OUT/sanitizer_$tool.log") processes with reports"
  [ "$trc" = 0 ] || failed+=("compute-sanitizer $tool (rc=$trc)")
  [ "$tests_failed" = 0 ] || failed+=("compute-sanitizer $tool ($tests_failed tests failed under the tool)")
  summary_args+=(--log "$tool=$OUT/sanitizer_$tool.log")
  # Each expected report's reproducer under the same tool.
  while IFS=$'\t' read -r name command; do
    # shellcheck disable=SC2086
    compute-sanitizer --tool "$tool" ${extra[@]+"${extra[@]}"} "$repro_bin"/$command > "$OUT/repro_${tool}_$name.log" 2>&1
    summary_args+=(--repro "$tool:$name=$OUT/repro_${tool}_$name.log")
  done < <(python3 diagnostics/repro/sanitizer_summary.py --expected diagnostics/repro/expected_reports.txt --list "$tool")
  # What each variant of the reproducers shows (which ordering the tool misses).
  variants=()
  [ "$tool" = racecheck ] && variants=("repro-tile-handoff named" "repro-tile-handoff named-fenced"
    "repro-tile-handoff mbarrier" "repro-tile-handoff syncthreads" "repro-tile-handoff generic"
    "repro-tile-handoff plain" "repro-tile-handoff plain-mbarrier" "repro-tile-handoff named-generic 96")
  [ "$tool" = synccheck ] && variants=("repro-cluster-receive st-async 10 48" "repro-cluster-receive st-async 10 12"
    "repro-cluster-receive st-async 8 64" "repro-cluster-receive release 10 48"
    "repro-cluster-receive remote-arrive 10 48" "repro-cluster-receive exit-sync 10 48"
    "repro-cluster-receive tile-barrier 10 48" "repro-cluster-receive barrier-loop 16 12"
    "repro-cluster-receive barrier-loop 8 96")
  for variant in ${variants[@]+"${variants[@]}"}; do
    log="$OUT/repro_${tool}_$(echo "$variant" | tr ' ' _).log"
    # shellcheck disable=SC2086
    compute-sanitizer --tool "$tool" ${extra[@]+"${extra[@]}"} "$repro_bin"/$variant > "$log" 2>&1
    note "  $tool on $variant: $(python3 diagnostics/repro/sanitizer_summary.py --describe "$log"); $(grep -E 'wrong' "$log" | tail -1)"
  done
done
if [ ${#summary_args[@]} -gt 0 ]; then
  python3 diagnostics/repro/sanitizer_summary.py --expected diagnostics/repro/expected_reports.txt "${summary_args[@]}" \
    > "$OUT/sanitizer_summary.txt" 2>&1
  src=$?
  sed 's/^/  /' "$OUT/sanitizer_summary.txt" | tee -a "$summary"
  note "sanitizer summary: rc=$src (expected reports: diagnostics/repro/expected_reports.txt)"
  [ "$src" = 0 ] || failed+=("sanitizers")
fi
cat "$OUT"/sanitizer_*.log > "$OUT/sanitizer.log" 2>/dev/null && rm -f "$OUT"/sanitizer_{memcheck,racecheck,synccheck}.log

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
  prc=$?
  note "python tests: rc=$prc $(grep -E '(passed|failed)' "$OUT/python_tests.log" | tail -1)"
  [ "$prc" = 0 ] || failed+=("python tests")
fi

if [ "${1:-}" != "--quick" ] && [ -x "$BUILD_DIR/tools/sparse-decode" ]; then
  "$BUILD_DIR/tools/sparse-decode" demo > "$OUT/demo.log" 2>&1
  drc=$?
  note "demo: rc=$drc"; tail -5 "$OUT/demo.log"
  [ "$drc" = 0 ] || failed+=("demo")
  # shellcheck disable=SC2086
  "$BUILD_DIR/tools/sparse-decode" bench --csv "$OUT/bench.csv" $BENCH_ARGS > "$OUT/bench.log" 2>&1
  note "bench: rc=$?"; cat "$OUT/bench.log" | tail -30
fi
if [ ${#failed[@]} -eq 0 ]; then
  note "verdict: PASS"
else
  note "verdict: FAIL (${failed[*]})"
fi
echo "==== summary"; cat "$summary"
[ ${#failed[@]} -eq 0 ]
