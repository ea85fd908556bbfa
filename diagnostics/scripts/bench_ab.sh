#!/usr/bin/env bash
# Times the same dsv4 benchmark set with several builds in one device call
# (A/B of a kernel change: the builds alternate per set, so that clock and
# temperature drift hit both alike). Writes CSV and logs under $OUT.
#   diagnostics/scripts/bench_ab.sh BUILD_DIR...        e.g. diagnostics/scripts/bench_ab.sh build-base build
# Environment: SETS (default "fp8 h64"): fp8 = 16 heads at widths 128 and 640,
# h64 = 64 and 128 heads at width 640 on the stream and split kernels,
# bf16 = BF16 16 heads, packed = the packed layout (packed64: at 64 and 128
# heads, where the 64-head form runs; packed64rules: kAuto's 64-head bounds,
# the 64-head form, its split path and the 16-head stream kernel and split
# path at 64 heads around them), dsa = dsa_decode with FP8
# and BF16 caches (16 heads, G 1, block 64, 16 regions); MODE (default shared):
# the bench's --mode. The logs and CSVs end up in two files (ab.log,
# ab_csv.tar): a device call returns only a few files.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
run() {  # build set args...
  local build=$1 set=$2; shift 2
  local mode=()  # a build without --mode times the shared mode only
  LD_LIBRARY_PATH="$PWD/$build" "$build/tools/sparse-decode" bench --help | grep -q -- "--mode" &&
    mode=(--mode "${MODE:-shared}")
  LD_LIBRARY_PATH="$PWD/$build" "$build/tools/sparse-decode" bench ${mode[@]+"${mode[@]}"} \
    --csv "$OUT/${build}_$set.csv" "$@" \
    > "$OUT/${build}_$set.log" 2>&1
  echo "== $build $set rc=$?"
  grep -E '^ +[0-9]' "$OUT/${build}_$set.log" | awk '{print $1, $2, $3, $4, $5, $6}' | paste -sd ';' | sed 's/;/ | /g'
}
for set in ${SETS:-fp8 h64}; do
  for build in "$@"; do
    case $set in
      fp8) run "$build" fp8 --heads 16 --tokens 1,6,12,48,128,512,2048 --widths 128,640 ;;
      h64) run "$build" h64s --heads 64,128 --widths 640 --tokens 1,6,64,512 --kernel stream
           run "$build" h64p --heads 64,128 --widths 640 --tokens 1,6,64,512 --kernel split ;;
      bf16) run "$build" bf16 --dtype bf16 --heads 16 --tokens 1,6,48,128,512,2048 --widths 640 ;;
      packed) run "$build" packed --layout packed --heads 16 --tokens 1,6,12,48,128,512,2048 --widths 128,640 ;;
      packed64) run "$build" packed64 --layout packed --heads 64,128 --tokens 1,12,48,128,512,2048 --widths 128,640 ;;
      packed64rules)
        for kernel in stream_h64 split_h64 stream split; do
          run "$build" "packed64rules_$kernel" --layout packed --heads 64 --tokens 24,32,48,64,80,96 \
            --widths 384,640,1152 --kernel "$kernel"
        done ;;
      dsa) run "$build" dsa --layout dsa --tokens 1,6,12,48,128,512,2048
           run "$build" dsa_bf16 --layout dsa --dtype bf16 --tokens 1,6,12,48,128,512,2048 ;;
    esac
  done
done
cat "$OUT"/*.log > "$OUT/ab.all" && rm -f "$OUT"/*.log && mv "$OUT/ab.all" "$OUT/ab.log"
tar -C "$OUT" -cf "$OUT/ab_csv.tar" $(cd "$OUT" && ls *.csv) && rm -f "$OUT"/*.csv
