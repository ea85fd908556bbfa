// From a section-1 table to dsv4_decode_hca's metadata (docs/spec.md,
// section 3): FlashInfer's
// convert_compressed_page_aligned_sparse_indices_to_hca_metadata
// (hca_sparse_indices_format="compressed-page-aligned"), with its output
// shapes, padding values and refusals, on the host or on the device.
//
// Input: a section-1 table of B requests of q_len tokens each (T = B * q_len
// rows, request-major), its lens (sparse_topk_lens) and seq_lens. Token i of
// request b sees visible = seq_lens[b] - q_len + i + 1 positions; its window
// is w = min(visible, 128) columns and its compressed stream n = floor(visible
// / 128) slots. The table must hold, for every token:
// - visible >= 1 and lens[t] == 128 + n (FlashInfer's dense causal lengths);
// - 128 + n <= width;
// - window columns c < w: rows of the SWA pool, in [0, swa_pool_rows);
// - compressed columns 128 + j, j < n: the canonical expansion
//   page * page_size + j % page_size, one page id in [0, compressed_pool_pages)
//   for all the slots of a page.
// Every other column is never read. Output, for every token:
// - swa_rows[t, c] = indices[t, c] for c < w, else 0; swa_lens[t] = w;
// - block_table[t, k] = the page of slots k * page_size.. for k * page_size <
//   n, else 0, over max_pages columns;
// - hca_seq_lens[b] = 128 + floor(seq_lens[b] / 128).
// FlashInfer's block table has convert_max_pages(max_b seq_lens[b],
// page_size) columns: a caller that knows seq_lens on the host asks for that
// width; a graph-safe caller preallocates the width of the longest sequence
// it serves (the extra columns are 0, like FlashInfer's padding). With these
// outputs, the same lens, q_len and pools, dsv4_decode_hca computes what
// dsv4_decode computes on the table. docs/formats/hca_layout.md, "The
// converter".
#pragma once

#include <cstdint>

#include "sparse_decode/status.h"
#include "sparse_decode/types.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode {

// The rules a table value can break, in the order each token is checked.
enum class Dsv4HcaConvertRule : int32_t {
  kNone = 0,
  kSeqLens = 1,       // seq_lens[b] - q_len + i + 1 < 1: the token sees no position
  kWidth = 2,         // 128 + n > width: the table cannot hold the token's slots
  kLens = 3,          // lens[t] != 128 + n
  kMaxPages = 4,      // convert_max_pages(seq_lens[b], page_size) > max_pages
  kWindowRow = 5,     // an active window column outside [0, swa_pool_rows)
  kPage = 6,          // an active page outside [0, compressed_pool_pages)
  kNotCanonical = 7,  // an active compressed column that is not page * page_size + j % page_size
};

// The report a conversion writes to `error` (3 int32): how many tokens
// break a rule, the first of them (-1 when none), and the first rule it
// breaks (a Dsv4HcaConvertRule; 0 when none). A conversion that refuses any
// token writes nothing else.
inline constexpr int kConvertErrorWords = 3;

struct Dsv4HcaConvertArgs {
  MemorySpace memory = MemorySpace::kHost;
  int64_t num_tokens = 0;  // T = num_requests * q_len, >= 1

  // The section-1 table (read).
  const int32_t* indices = nullptr;  // [T, W] section-1 columns, 4-byte aligned
  int32_t width = 0;                 // W: >= 128, a multiple of 4
  int64_t indices_stride = 0;        // elements between tokens, >= W
  const int32_t* lens = nullptr;     // [T] sparse_topk_lens: 128 + n, counting the 128 window columns
  const int32_t* seq_lens = nullptr;        // [B] KV length of each request
  int32_t num_requests = 0;                 // B, >= 1
  int32_t q_len = 0;                        // query tokens of every request, >= 1
  const int32_t* cum_seq_lens_q = nullptr;  // must be null: FlashInfer's HCA rows are B * q_len
  int32_t max_q_len = 0;                    // read only with cum_seq_lens_q

  // The pools the table names (only their sizes are read).
  int64_t page_size = 0;              // slots per page of the compressed pool: 2, 4, 8, 16, 32, 64 or 128
  int64_t swa_pool_rows = 0;          // rows of the SWA pool, >= 1
  int64_t compressed_pool_pages = 0;  // pages of the compressed pool, >= 1

  // The HCA metadata (written; Dsv4HcaDecodeArgs' fields of the same names).
  int32_t* swa_rows = nullptr;            // [T, 128], 16-byte aligned
  int64_t swa_rows_stride = kSwaColumns;  // >= 128, a multiple of 4
  int32_t* swa_lens = nullptr;            // [T]
  int32_t* block_table = nullptr;         // [T, max_pages], 4-byte aligned
  int32_t max_pages = 0;                  // >= 1; FlashInfer's width is convert_max_pages(max seq_lens, page_size)
  int64_t block_table_stride = 0;         // >= max_pages
  int32_t* hca_seq_lens = nullptr;        // [B]

  // The report (written): kConvertErrorWords int32, in the call's memory
  // space; required for device memory, where it is the only report of the
  // table's values.
  int32_t* error = nullptr;
};

// Block-table columns that FlashInfer's conversion gives a batch whose
// longest sequence is `max_seq_len`: its compressed slots floor(max_seq_len /
// 128) rounded up to tiles of 128 slots, in pages of `page_size`, at least 1.
// 0 for a page size that validate() refuses.
int32_t convert_max_pages(int32_t max_seq_len, int64_t page_size);

// Checks every argument that the host can check (not the table's values).
// InvalidArgument names the argument and the expected value.
Status validate(const Dsv4HcaConvertArgs& args);

// Converts. Host memory: synchronously on the CPU; a table value that breaks
// a rule is InvalidArgument naming the first such token, its argument and the
// expected value, with the report in `error` when given; nothing else is
// written. Device memory: on `stream`, with no allocation and no host
// synchronization (CUDA-graph safe), deterministic; the call returns Ok once
// the work is queued, and the report in `error` (read it after the stream)
// says whether the table was converted: the outputs are written only when
// error[0] is 0, and are then the host conversion's, bit for bit.
// NotSupported without an sm_90 device.
Status convert_page_aligned_indices(const Dsv4HcaConvertArgs& args, CUstream_st* stream);

}  // namespace sparse_decode
