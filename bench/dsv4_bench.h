// `sparse-decode bench`: per-layer time of dsv4_decode measured as DESIGN.md
// "How performance is measured" says, beside a plain gather of the same rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_indices.h"
#include "sparse_decode/dsa_decode.h"
#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::bench {

inline constexpr size_t kMiB = size_t{1} << 20;

// Which rows the bench times: plain 512-byte FP8 (or BF16) rows through
// dsv4_decode (SPEC section 1), packed 584-byte rows through
// dsv4_decode_packed (SPEC section 2; run_packed_bench in packed_bench.h),
// the compressed stream by pages through dsv4_decode_hca (SPEC section 3;
// run_hca_bench in hca_bench.h), or the region-paged DSA cache through
// dsa_decode (SPEC section 4; run_dsa_bench in dsa_bench.h).
enum class BenchLayout { kPlain, kPacked, kHca, kDsa };

struct BenchOptions {
  BenchLayout layout = BenchLayout::kPlain;  // --layout plain | packed | hca | dsa
  std::vector<int64_t> tokens = {1, 6, 12, 48, 128, 512, 2048};  // T of each shape
  std::vector<int32_t> widths = {640, 128};                       // W of each shape (packed: SWA 128 + extra W - 128)
  std::vector<int32_t> heads;  // query heads of each shape (--heads); empty: the layout's (default_heads)
  std::vector<BenchMode> modes;  // --mode; empty: the layout's default modes (layout_modes), in that order
  int layers = 8;         // L: decode calls in the graph, each with its own rows
  int replays = 30;       // timed replays; the median is reported
  int warmup = 3;         // untimed replays first
  std::string csv_path;   // empty: no CSV
  bool enable_pdl = false;
  bool batch_invariant = false;  // --batch-invariant (packed): Dsv4PackedDecodeArgs::batch_invariant
  DType dtype = DType::kFloat8E4M3;  // of q and the pools (--dtype fp8 | bf16)
  std::vector<Dsv4Kernel> kernels = {Dsv4Kernel::kAuto};  // each timed per shape (--kernel)
  int gather_rows_per_warp = 0;  // of the reference gather: 1, 2, 4, 8, or 0 = the fastest of these a shape
  size_t swa_pool_bytes = 512 * kMiB;          // split into L regions
  size_t compressed_pool_bytes = 1536 * kMiB;  // split into L regions
  size_t flush_bytes = 512 * kMiB;             // written before each replay to evict the L2
  int64_t check_tokens = 6;                    // tokens of layer 0 checked against the fp64 reference
  // --layout dsa only (each a list: every combination is a shape; --heads is per group, 1..16).
  std::vector<int32_t> dsa_groups = {1};         // G: KV groups (--groups); rows = tokens * G
  std::vector<int32_t> dsa_block_sizes = {64};   // key positions a region and a page (--block)
  std::vector<int32_t> dsa_regions = {16};       // R: region columns a row (--regions)
  std::vector<int32_t> dsa_splits = {0};         // --splits; 0 = dsa_splits_for(rows)
  std::vector<DsaKernel> dsa_kernels = {DsaKernel::kAuto};  // --dsa-kernel: each timed on every shape
  size_t dsa_cache_bytes = 0;                    // --cache-mib; 0 = sized by the shapes (>= 2 GiB)
  uint64_t seed = 1;
};

// One timed shape (a CSV row).
struct BenchRow {
  int64_t tokens = 0;
  int32_t width = 0;
  int32_t heads = 0;
  BenchMode mode = BenchMode::kShared;
  int layers = 0;
  Dsv4Kernel kernel = Dsv4Kernel::kAuto;  // asked for
  Dsv4Kernel ran = Dsv4Kernel::kAuto;     // what dsv4_decode ran
  double decode_us = 0.0;      // median replay time / L
  DType dtype = DType::kFloat8E4M3;
  int64_t gathered_bytes = 0;  // per layer: active rows * row bytes + q + out
  double gather_us = 0.0;      // the plain gather of the same rows, median replay time / L
  int gather_rows_per_warp = 0;  // the gather variant that gather_us timed
  double check_error = 0.0;    // relative L2 error of layer 0's first tokens

  double gbps() const { return decode_us > 0 ? gathered_bytes / decode_us / 1e3 : 0.0; }
  double gather_fraction() const { return decode_us > 0 ? gather_us / decode_us : 0.0; }
};

// --kernel stream_h64 and split_h64 (packed rows only):
// Dsv4PackedKernel::kStreamH64 and kSplitH64, carried in the options'
// Dsv4Kernel list by value (packed_layers.h casts the kernels; auto,
// cluster, stream and split share their values).
inline constexpr Dsv4Kernel kPackedStreamH64 = static_cast<Dsv4Kernel>(4);
inline constexpr Dsv4Kernel kPackedSplitH64 = static_cast<Dsv4Kernel>(5);

const char* kernel_name(Dsv4Kernel kernel);

// The head counts a run times when --heads is not given: 16, 64 and 128 for
// plain and packed rows; 16 for HCA; 16 a group for DSA.
std::vector<int32_t> default_heads(BenchLayout layout);
// The input modes a layout runs without --mode: shared and distinct; DSA
// distinct (its shared mode with --mode shared or all).
std::vector<BenchMode> layout_modes(BenchLayout layout);
// `options` with the layout's head counts and modes where they are empty.
BenchOptions with_layout_defaults(BenchOptions options);

// Runs every shape and prints the table (and writes the CSV). Returns the
// exit code: 0 when every shape was timed or skipped as unsupported, 1 when a
// check failed, 2 when there is no usable CUDA device or an option is bad.
int run_dsv4_bench(const BenchOptions& options);

// What --layout plain asks of the options: empty when they are fine, else one line
// naming the option, what it accepts and what it got.
std::string check_dsv4_options(const BenchOptions& options);

}  // namespace sparse_decode::bench
