// The flat, by-value argument block of the packed kernels (cluster, stream,
// combine), built on the host from a validated Dsv4PackedDecodeArgs
// (launch.cu).
#pragma once

#include <cstdint>

#include "common/math.cuh"

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

// A segment's request views (the general form).
struct SegmentViews {
  int64_t indices_request_stride;  // elements
  int64_t lens_token_stride;       // elements
  int64_t lens_request_stride;     // elements
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
  // Read by the kernels' general form only (kGeneral; the plain form serves
  // flat arguments with lens at stride 1, no seq_lens window and lse without
  // the sink). Token t of an argument sits at (t / request_tokens) * its
  // request stride + (t % request_tokens) * its token stride: [B, q_len]
  // request views, and flat arguments with request stride = request_tokens * token stride.
  FastDivisor request_tokens;  // q_len of the request views; 1 without any
  int64_t q_request_stride;    // elements
  int64_t out_request_stride;  // elements
  int64_t lse_request_stride;  // elements
  SegmentViews swa_views, extra_views;
  // The SWA window of section 1 (SWA column c < 128 active only if c <
  // min(128, p + 1)), or seq_lens null.
  const int32_t* seq_lens;        // [B]
  const int32_t* cum_seq_lens_q;  // [B + 1] or null: varlen query offsets
  int32_t q_len;                  // uniform query length (without cum_seq_lens_q)
  int32_t num_requests;           // B
  int32_t lse_with_sink;          // SinkTerm::kInOutputAndLse with sinks: lse counts the sink
};

}  // namespace sparse_decode::dsv4_packed
