// The indices of the plain, packed and HCA benches, drawn on the host in two
// input modes (DESIGN.md "How performance is measured"), and the pool sizes
// that the distinct-rows mode needs. Host code only: the CPU tests call it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sparse_decode/types.h"

namespace sparse_decode::bench {

inline constexpr int32_t kBenchHeads = 16;
inline constexpr int32_t kBenchQueryLen = 6;   // query tokens per request (DeepSeek-V4 MTP decode), shared mode
inline constexpr int64_t kBenchPageSize = 64;  // rows per page of every pool

// kShared: requests of kBenchQueryLen tokens whose SWA windows overlap (token
// i of a request starts i rows later), top-k rows distinct within a token
// but free to repeat across tokens: part of the rows come from L2.
// kDistinct: one request a token, its 128 window rows its own, every top-k
// row (or page) drawn without replacement across the layer: no row is read
// twice in a layer, every row comes from DRAM.
enum class BenchMode { kShared, kDistinct };

const char* mode_name(BenchMode mode);  // "shared" or "distinct"

// What every layer of a shape shares.
struct BenchShape {
  int64_t tokens = 6;   // T
  int32_t width = 640;  // W = 128 SWA + top-k
  int32_t heads = kBenchHeads;
  DType dtype = DType::kFloat8E4M3;  // of q and the pools (BenchLayers sets the pools' own)
  bool enable_pdl = false;
  BenchMode mode = BenchMode::kShared;
  // The top-k columns as whole pages of kBenchPageSize rows (W - 128 a
  // multiple of it): the canonical page expansion that HCA's block table
  // names (--layout hca).
  bool page_aligned_topk = false;
};

// Indices [T, W] of one layer over an SWA region of `swa_rows` rows and a
// compressed region of `compressed_rows` rows, every column active.
// kShared: per request of kBenchQueryLen tokens a window of consecutive SWA
// rows (token i of a request starts i rows later; requests use disjoint
// windows of 144 rows while the region has room), and per token W - 128
// distinct scattered top-k rows (with page_aligned_topk: (W - 128) / 64
// distinct scattered pages, each page's rows in order).
// kDistinct: token t reads the 128 consecutive rows of its own window (T
// disjoint windows in a random order), and T * (W - 128) top-k rows (or
// pages) drawn without replacement from the whole region; it throws when
// the regions are smaller than T * 128 and T * (W - 128) rows.
std::vector<int32_t> make_layer_indices(const BenchShape& shape, int64_t swa_rows, int64_t compressed_rows,
                                        uint64_t seed);

// Rows a layer's regions hold in the distinct mode so that the largest of
// the shapes (each T with each W) fits: T * 128 SWA rows and T * (W - 128)
// compressed rows, each rounded up to whole pages.
struct RegionRows {
  int64_t swa = 0;
  int64_t compressed = 0;
};
RegionRows distinct_region_rows(const std::vector<int64_t>& tokens, const std::vector<int32_t>& widths);

// Bytes of the two pools of `layers` regions: the defaults (the shared
// mode's pools, unchanged), or in the distinct mode at least enough for
// distinct_region_rows at `row_bytes` a row (512 FP8, 1024 BF16, 584 packed).
struct PoolBytes {
  size_t swa = 0;
  size_t compressed = 0;
};
PoolBytes pool_bytes_for(BenchMode mode, const std::vector<int64_t>& tokens, const std::vector<int32_t>& widths,
                         int layers, int64_t row_bytes, PoolBytes defaults);

// Whether a distinct-mode run fits the device: its pools (pool_bytes_for)
// plus the layers' own q, out and indices at the largest shape
// (`q_bytes_per_value` 1 FP8, 2 BF16; out is BF16) against `available`
// bytes. Empty when it fits; else one line with what it needs, what is
// available and the largest T that fits at the widest width.
std::string distinct_fit_problem(const std::vector<int64_t>& tokens, const std::vector<int32_t>& widths,
                                 const std::vector<int32_t>& heads, int layers, int64_t row_bytes,
                                 int64_t q_bytes_per_value, PoolBytes defaults, size_t available);

}  // namespace sparse_decode::bench
