#!/usr/bin/env bash
# Profiles one launch of a dsv4 kernel under a `sparse-decode bench` config with
# Nsight Compute (warp states, scheduler, per-SASS-line stall samples) and
# writes the report, the details and the SASS source page (CSV) under $OUT;
# prints the stall samples by opcode and SASS line (diagnostics/scripts/ncu_top_stalls.py).
#   diagnostics/scripts/ncu_profile.sh NAME KERNEL_REGEX BENCH_ARGS...
# e.g. diagnostics/scripts/ncu_profile.sh stream64_t512 stream_kernel --heads 64 --tokens 512 --widths 640 --kernel stream
# Environment: BUILD_DIR (default build), OUT (default ./ncu-out), SKIP (launches to skip, default 8).
set -uo pipefail
cd "$(dirname "$0")/../.."
name=$1 regex=$2; shift 2
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-$PWD/ncu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUILD_DIR:${LD_LIBRARY_PATH:-}"
ncu --clock-control none -k "regex:$regex" --launch-skip "${SKIP:-8}" --launch-count 1 \
  --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --metrics "regex:sm__inst_executed_pipe_[a-z0-9_]+\.avg\.pct_of_peak_sustained_active" \
  --import-source no -f -o "$OUT/$name" \
  "$BUILD_DIR/tools/sparse-decode" bench --layers 8 --replays 3 "$@" > "$OUT/$name.run.log" 2>&1
echo "ncu $name: rc=$?"
ncu --import "$OUT/$name.ncu-rep" --print-details all > "$OUT/$name.details.txt" 2>&1
ncu --import "$OUT/$name.ncu-rep" --page source --print-source sass --csv > "$OUT/$name.sass.csv" 2>&1
grep -E 'sm__inst_executed_pipe_(alu|fma|fmaheavy|lsu|tensor|uniform|xu)\.' "$OUT/$name.details.txt"
python3 diagnostics/scripts/ncu_top_stalls.py "$OUT/$name.sass.csv" 20
grep -E 'Duration|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|Registers Per|Stall' "$OUT/$name.details.txt" | head -20
