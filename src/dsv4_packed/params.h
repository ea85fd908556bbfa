// The flat, by-value argument block of the packed kernels (cluster, stream,
// combine), built on the host from a validated Dsv4PackedDecodeArgs
// (launch.cu).
#pragma once

#include <cstdint>

namespace sparse_decode::dsv4_packed {

struct SegmentParams {
  const uint8_t* pool;       // page p at pool + p * page_stride bytes
  int64_t page_stride;       // bytes
  int64_t scale_offset;      // page_size * 576: where a page's scale rows start
  int64_t rows;              // pages * page_size: indices at or past it are out of range
  uint32_t page_size;        // slots a page, clamped to 2^31 (every int32 index then is in page 0)
  const int32_t* indices;    // [T, width]
  int64_t indices_stride;    // elements
  int32_t width;             // columns; 0 for an absent extra segment
  int32_t chunks;            // 64-column chunks the segment takes: ceil(width / 64)
  const int32_t* lens;       // [T] or null (all `width` columns)
};

struct Params {
  const uint16_t* q;         // [T, H, 512] BF16 bits
  int64_t q_token_stride;    // elements
  int64_t q_head_stride;     // elements
  SegmentParams swa;   // chunks 0 .. swa.chunks - 1
  SegmentParams extra; // then extra.chunks chunks
  int32_t num_heads;         // H; CTAs of grid row y serve heads 16y .. 16y + 15 (those < H)
  int32_t chunks_per_cta;    // the cluster kernel: chunks each CTA of a token's cluster walks through
  float scale_log2;          // softmax_scale * log2(e)
  const float* sinks;        // [H] or null
  uint16_t* out;             // [T, H, 512] BF16 bits
  int64_t out_token_stride;  // elements
  int64_t out_head_stride;   // elements
  float* lse;                // [T, H] or null
  int64_t lse_token_stride;  // elements
  int32_t* out_of_range_count;  // or null
  uint8_t* workspace;        // the split path's shares (SplitWorkspace), or null
  int32_t split_ctas;        // the split path: CTAs a (token, 16-head group) unit, each a run of chunks
};

}  // namespace sparse_decode::dsv4_packed
