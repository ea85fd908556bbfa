#!/usr/bin/env bash
# Do these builds compute the same bits as the first? Runs the GPU tests of
# each build (a gtest filter) under the output-digest shim with one seed, all
# builds at once (the fp64 reference on the CPU is their cost; the bits do not
# depend on what else runs), and compares each digest file with the first
# build's. Prints the tests' result lines and, per build, how many calls
# differ. Files under $OUT.
#   diagnostics/scripts/same_bits.sh SHIM FILTER BUILD_DIR...
#   e.g. diagnostics/scripts/same_bits.sh build-digest/liboutput-digest.so '*H64*' build-base build
# SHIM: the output-digest library (diagnostics/output_digest.cpp); FILTER: a
# --gtest_filter; each BUILD_DIR holds libsparse_decode.so* and
# tests/sparse_decode_gpu_tests. Environment: SEED (default 1), TIMEOUT (a
# build's test run, seconds; default 300).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
shim=$(realpath "$1") filter=$2
shift 2
declare -A pid
for build in "$@"; do
  name=$(basename "$build")
  SPARSE_DECODE_TEST_SEED=${SEED:-1} SPARSE_DECODE_DIGEST_FILE="$OUT/digest_$name.txt" \
    LD_LIBRARY_PATH="$PWD/$build" LD_PRELOAD="$shim" \
    timeout "${TIMEOUT:-300}" "$build/tests/sparse_decode_gpu_tests" --gtest_filter="$filter" \
    > "$OUT/tests_$name.log" 2>&1 &
  pid[$name]=$!
done
base=""
for build in "$@"; do
  name=$(basename "$build")
  wait "${pid[$name]}"
  echo "== $name tests rc=$? ($(grep -cE '^\[       OK' "$OUT/tests_$name.log") passed," \
    "$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$OUT/tests_$name.log") failed," \
    "$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$OUT/tests_$name.log") skipped)"
  sort "$OUT/digest_$name.txt" -o "$OUT/digest_$name.txt" 2>/dev/null
  if [ -z "$base" ]; then
    base=$name
  else
    echo "   calls differing from $base: $(diff "$OUT/digest_$base.txt" "$OUT/digest_$name.txt" | grep -c '^>')" \
      "of $(wc -l < "$OUT/digest_$name.txt")"
  fi
done
