#!/usr/bin/env bash
# Nsight Compute profile of the dsv4 kernel at a few shapes (H200), with
# source-level stall sampling, plus the SASS. Writes under $OUT.
# KERNEL_REGEX picks the kernel (default: any dsv4 kernel).
#   BUILD_DIR=build diagnostics/scripts/profile.sh 1,6      (token counts at width 640)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/profile-out}
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUILD_DIR:${LD_LIBRARY_PATH:-}"
cuobjdump --dump-sass "$BUILD_DIR"/libsparse_decode.so > "$OUT/sass.txt" 2>&1
for tokens in ${1//,/ }; do
  ncu --clock-control none --set full --import-source yes --warp-sampling-interval 0 -k "regex:${KERNEL_REGEX:-stream_kernel|cluster_kernel}" \
    --launch-skip 10 --launch-count 1 -o "$OUT/t$tokens" "$BUILD_DIR/tools/sparse-decode" demo --tokens "$tokens" \
    > /dev/null 2>&1
  ncu --import "$OUT/t$tokens.ncu-rep" --page source --csv --print-source sass > "$OUT/t${tokens}_source.csv" 2>&1
  ncu --import "$OUT/t$tokens.ncu-rep" --page details 2>&1 | grep -E "Duration|Elapsed Cycles|Registers Per|Achieved Occ"
  rm -f "$OUT/t$tokens.ncu-rep"
done
