// The GPU path of dsv4_decode_hca (SPEC section 3): a small kernel expands
// the HCA metadata into a section-1 index table and lens in the caller's
// workspace (docs/formats/hca_layout.md, "The GPU path"), then section 1's kernels
// run on it. This header is the host side: the workspace layout, the
// kernel's parameters and its launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::dsv4_hca {

// Section 1's widest table: 128 window columns + 16384 compressed ones.
inline constexpr int64_t kMaxCompressedColumns = 16384;

// Width W' of the expanded table: 128 + max_pages * page_size rounded up to a
// multiple of 4 (testing::expand_to_section1's), or 0 when it exceeds
// section 1's 128 + 16384 (or page_size < 1).
int32_t expanded_width(int32_t max_pages, int64_t page_size);

// Where the pieces of the HCA workspace lie, in bytes from its start (each
// 16-byte aligned): section 1's split scratch first (so that its alignment is
// the workspace's), then the table [T, W'] int32, then lens [T] int32.
struct WorkspaceLayout {
  int32_t width = 0;             // W'
  size_t scratch_bytes = 0;      // section 1's workspace_size of the expanded args (rounded up to 16)
  size_t table_offset = 0;
  size_t table_bytes = 0;        // T * W' * 4
  size_t lens_offset = 0;
  size_t lens_bytes = 0;         // T * 4 rounded up to 16
  size_t total = 0;              // saturates at SIZE_MAX
};

// The parameters of the expand kernel (by value).
struct ExpandParams {
  const int32_t* swa_rows;       // [T, swa_rows_stride]
  int64_t swa_rows_stride;       // elements, a multiple of 4
  const int32_t* swa_lens;       // [T]
  const int32_t* block_table;    // [T, block_table_stride]
  int64_t block_table_stride;    // elements
  int32_t max_pages;
  int32_t page_size;             // of compressed_kv (<= 16384 here)
  const int32_t* lens;           // [T]
  const int32_t* hca_seq_lens;   // [B]
  int32_t num_requests;          // B
  const int32_t* cum_seq_lens_q; // [B + 1] or null
  int32_t q_len;                 // uniform query length without cum_seq_lens_q
  int32_t* indices;              // out: [T, width]
  int32_t width;                 // W'
  int32_t* expanded_lens;        // out: [T]
  int64_t num_tokens;            // T
};

// Launches the expand kernel on `stream`: a CTA a token; with `pdl` it is
// launched with programmatic stream serialization (it waits for the previous
// grid before reading or writing anything).
Status launch_expand(const ExpandParams& params, bool pdl, CUstream_st* stream);

}  // namespace sparse_decode::dsv4_hca
