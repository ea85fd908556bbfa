// The flat, by-value argument block of the dsv4 kernels, in bytes where the
// kernels address bytes. Built on the host from a validated Dsv4DecodeArgs.
#pragma once

#include <cstdint>

#include "common/math.cuh"

namespace sparse_decode::dsv4 {

struct PoolParams {
  const uint8_t* data;      // [pages, page_size, row] bytes
  int64_t rows;             // pages * page_size
  int64_t page_size;        // 1 when pages are contiguous (rows are then row_stride apart)
  int64_t page_stride;      // bytes between pages
  int64_t row_stride;       // bytes between rows of a page
};

// Read by the kernels' page-walk form only (Traits::kPageWalk: dsv4_decode_hca
// on the device): where a token's columns come from instead of indices and
// lens (steps/column_source.cuh). The per-token metadata arrays are
// addressed as the general form addresses its arguments (Dsv4Params,
// request_tokens): token stride and request stride, in elements.
struct PageWalkParams {
  const int32_t* swa_rows;       // [T, 128]: the index of window column c
  int64_t swa_rows_stride;       // elements
  const int32_t* swa_lens;       // [T]: window columns, clamped to 0..128
  const int32_t* block_table;    // [T, max_pages]: the page of compressed column 128 + j
  int64_t block_table_stride;    // elements
  const int32_t* lens;           // [T]: 128 + compressed slots the token attends
  int64_t swa_rows_request_stride;     // elements
  int64_t swa_lens_token_stride;       // elements
  int64_t swa_lens_request_stride;     // elements
  int64_t block_table_request_stride;  // elements
  int64_t lens_token_stride;           // elements
  int64_t lens_request_stride;         // elements
  const int32_t* hca_seq_lens;   // [B]: 128 + backing compressed slots of each request
  FastDivisor page_size;         // of compressed_kv (<= 16384)
  int32_t columns;               // 128 + max_pages * page_size: the columns that have an entry
};

struct Dsv4Params {
  const uint8_t* q;         // [T, H, 512] elements
  int64_t q_token_stride;   // bytes
  int64_t q_head_stride;    // bytes
  PoolParams swa;           // columns 0..127
  PoolParams compressed;    // columns 128..W-1
  const int32_t* indices;   // [T, W]
  int64_t indices_stride;   // elements
  int32_t width;            // W
  const int32_t* lens;      // [T] or null
  const int32_t* seq_lens;  // [B] or null: sliding-window validity
  const int32_t* cum_seq_lens_q;  // [B + 1] or null: varlen query offsets
  int32_t q_len;            // uniform query length (without cum_seq_lens_q)
  int32_t num_requests;     // B
  const float* sinks;       // [H] or null
  float bmm1_scale;         // used when bmm1_scale_ptr is null
  const float* bmm1_scale_ptr;
  float bmm2_scale;         // used when bmm2_scale_ptr is null
  const float* bmm2_scale_ptr;
  uint16_t* out;            // [T, H, 512] bf16 bits
  int64_t out_token_stride; // elements
  int64_t out_head_stride;  // elements
  float* lse;               // [T, H] or null
  int64_t lse_token_stride; // elements
  int32_t* out_of_range_count;  // or null
  int64_t num_tokens;
  int32_t num_heads;        // H: 8 (run as 16 with 8 silent heads) or 16..128 in head groups of 16
  int32_t head_groups;      // ceil(H / 16), or ceil(H / 64) on 64-head tiles: work units a token
  int32_t chunks;           // 64-column chunks of a token: ceil(W / 64)
  int32_t chunks_per_group; // chunks of a group (the last group may hold fewer)
  int32_t column_groups;    // column groups of a token: ceil(chunks / chunks_per_group)
  uint8_t* workspace;       // the split path's group results (SplitWorkspace), 16-byte aligned; else null
  int32_t split_ctas;       // split kernel: CTAs a unit, each walking split_groups column groups
  int32_t split_groups;     // (the last CTA of a unit may walk fewer)
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  int32_t skip_stages;      // diagnostic builds: stages left out (instrument::kSkip* bits)
#endif
  // Read by the kernels' general form only (Traits::kGeneral; the plain form
  // serves flat arguments with lens at stride 1 and lse without the sink).
  // Token t of an argument sits at (t / request_tokens) * its request stride
  // + (t % request_tokens) * its token stride: [B, q_len] request views, and
  // flat arguments with request stride = request_tokens * token stride.
  FastDivisor request_tokens;      // q_len of the request views; 1 without any
  int64_t q_request_stride;        // bytes
  int64_t indices_request_stride;  // elements
  int64_t lens_token_stride;       // elements
  int64_t lens_request_stride;     // elements
  int64_t out_request_stride;      // elements
  int64_t lse_request_stride;      // elements
  int32_t lse_with_sink;           // SinkTerm::kInOutputAndLse with sinks: lse counts the sink
  // Read by the page-walk form only (Traits::kPageWalk), which also reads
  // cum_seq_lens_q / q_len / num_requests for the token's request (seq_lens null).
  PageWalkParams pages;
};

}  // namespace sparse_decode::dsv4
