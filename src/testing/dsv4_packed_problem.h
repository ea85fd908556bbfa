// Synthetic DeepSeek-V4 decode problems on packed 584-byte rows (SPEC
// section 2), on the host, for the tests, the demo and the benchmark.
//
// What makes them realistic, and hard:
// - Rows are written the way DeepSeek-V4's quantizer writes them: per 64-dim
//   tile, the UE8M0 scale is amax / 448 rounded up to a power of two, and the
//   E4M3 bytes fill the whole FP8 range.
// - Scale bytes cover [scale_min, scale_max] (default 107..137: 2^-20..2^10)
//   the way real caches do: the magnitude of a tile depends mostly on its
//   dims (the latent is RMS-normalized with per-dim weights), so each of the
//   8 dim groups (7 tiles, the BF16 tail) gets its own level, spread evenly
//   over the range, and each row jitters it by -2..2 bytes. Rows thus have
//   similar norms and the softmax is neither uniform nor one-hot, while a
//   small tile is 2^30 below a large one. A few extreme bytes (0, 2, 15,
//   150, 160) can be mixed in.
// - The SWA segment names consecutive positions of each request through a
//   random block table (so the window crosses pages at any page size);
//   requests shorter than the window leave columns unfilled. The extra
//   segment names scattered distinct rows.
// - Every slot that no active column names holds NaN (E4M3 0x7F, BF16 0x7FC0,
//   scale bytes 0xFF), and so does every row's padding scale byte and every
//   gap between pages: a kernel that reads a masked row, the padding byte or
//   the gap shows NaN.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "reference/dsv4_packed_reference.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::testing {

struct Dsv4PackedProblemConfig {
  int64_t tokens = 6;            // T
  int32_t heads = 16;            // H
  int32_t q_len = 6;             // query tokens per request (the last request may be shorter)
  int32_t swa_width = 128;       // W of the SWA segment
  int32_t extra_width = 512;     // W of the extra segment; 0: SWA only (extra absent)
  int64_t page_size = 64;        // slots per page of both pools
  int64_t page_gap = 0;          // bytes between pages past page_size * 584 rounded up to 16 (a multiple of 16)
  int64_t extra_page_size = 0;   // slots per page of the extra pool; 0: page_size
  int64_t extra_page_gap = -1;   // page gap of the extra pool; -1: page_gap
  int64_t extra_rows = 4096;     // rows of the extra pool (whole pages; the last quarter is never active)
  double short_fraction = 0.25;  // requests shorter than the window (unfilled SWA columns)
  bool swa_lens = true;          // pass SWA lens (= filled window); else null and unfilled columns are -1
  bool sinks = true;             // draw sinks [H] from N(0, 1)
  double hole_fraction = 0.0;    // fraction of active extra columns set to -1
  int scale_min = 107;           // UE8M0 bytes of the tiles' scales: [scale_min, scale_max]
  int scale_max = 137;           // (the row jitter and the quantizer may land up to 3 bytes outside)
  double extreme_fraction = 0.0;  // tiles whose scale byte is one of 0, 2, 15, 150, 160 instead
  uint64_t seed = 1;
};

struct Dsv4PackedProblem {
  Dsv4PackedProblemConfig config;
  std::vector<uint16_t> q;               // [T, H, 512] BF16 bits, contiguous
  std::vector<uint8_t> swa_pool;         // swa_pages * page_stride() bytes
  std::vector<uint8_t> extra_pool;       // extra_pages * extra_page_stride() bytes (empty without extra)
  int64_t swa_pages = 0, extra_pages = 0;
  std::vector<int32_t> swa_indices;      // [T, swa_stride()]
  std::vector<int32_t> swa_lens;         // [T] (empty when config.swa_lens is false)
  std::vector<int32_t> extra_indices;    // [T, extra_stride()]
  std::vector<int32_t> extra_lens;       // [T]
  std::vector<float> sinks;              // [H] (empty when config.sinks is false)
  float softmax_scale = 0.0f;            // 2 / median norm of the live rows: scores of order 1
  std::array<int, kPackedTiles + 1> group_scales{};  // level of tiles 0..6 and of the tail (see above)

  // page_size * 584 rounded up to 16 bytes (odd page sizes need 8 more), plus the gap.
  int64_t page_stride() const { return (config.page_size * kPackedRowBytes + 15) / 16 * 16 + config.page_gap; }
  // The extra pool's own geometry (the SWA pool's unless configured).
  int64_t extra_page_size() const { return config.extra_page_size > 0 ? config.extra_page_size : config.page_size; }
  int64_t extra_page_stride() const {
    return (extra_page_size() * kPackedRowBytes + 15) / 16 * 16 +
           (config.extra_page_gap >= 0 ? config.extra_page_gap : config.page_gap);
  }
  // Elements between tokens of the indices: width rounded up to a multiple of
  // 4; the padding columns hold garbage (rows of the pool, NaN ones included).
  int64_t swa_stride() const { return (config.swa_width + 3) / 4 * 4; }
  int64_t extra_stride() const { return (config.extra_width + 3) / 4 * 4; }
  bool has_extra() const { return config.extra_width > 0; }

  // Arguments over this problem's host vectors; out [T, H, 512] BF16 and lse
  // [T, H] (may be null) are contiguous buffers of the caller.
  Dsv4PackedDecodeArgs host_args(void* out, float* lse) const;

  // Writes fresh random content (drawn as the generator draws live rows) into
  // row `row` of a pool; the padding scale byte is left as it is.
  void fill_row(reference::PackedSegmentId segment, int64_t row, uint64_t seed);
};

Dsv4PackedProblem make_dsv4_packed_problem(const Dsv4PackedProblemConfig& config);

// Quantizes 512 values into a packed row as DeepSeek-V4 does: per tile of 64
// dims, scale byte 127 + ceil(log2(amax / 448)) (clamped to 0..254), E4M3
// nearest even of value / scale; dims 448..511 as BF16. Writes data [576]
// and scales [0..6]; scales[7] (padding) is not written.
void quantize_packed_row(const double* values, uint8_t* data, uint8_t* scales);

}  // namespace sparse_decode::testing
