// DeepSeek-V4 HCA decode: the compressed stream read by pages (docs/spec.md, section 3).
//
// FlashInfer's backend="cute-dsl" argument set. Each query token attends two
// streams of FP8 E4M3 rows of 512 dims (key = value), in this order:
// - the sliding window: columns c < swa_lens[t] of swa_rows[t, 0..127], each
//   an absolute row of swa_kv;
// - the compressed stream, read densely by pages: slots
//   j < min(lens[t] - 128, hca_seq_lens[b] - 128, max_pages * page_size),
//   slot j being row block_table[t, j / page_size] * page_size + j % page_size
//   of compressed_kv (page_size = compressed_kv.page_size).
// A row index or page id below 0 is masked; one past its pool is masked and
// counted. The softmax is section 1's. docs/formats/hca_layout.md has the details
// and every decision the SPEC leaves open.
//
// validate, supports and workspace_size are overloads of the section-1
// names; the call is dsv4_decode_hca. convert_page_aligned_indices
// (dsv4_hca_convert.h, included here) turns a section-1 table whose
// compressed columns are the canonical page expansion into this form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_hca_convert.h"
#include "sparse_decode/status.h"
#include "sparse_decode/types.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode {

// q, out, lse and the per-token metadata (swa_rows, swa_lens, block_table,
// lens) may each be a [B, q_len, ...] request view as in section 1
// (dsv4_decode.h, "Request views"): token t = b * q_len + i at b * R + i * S.
// A nonzero *_request_stride needs the uniform q_len (cum_seq_lens_q null)
// and num_tokens = num_requests * q_len; 0 keeps that argument flat.
struct Dsv4HcaDecodeArgs {
  MemorySpace memory = MemorySpace::kDevice;
  int64_t num_tokens = 0;  // T: query tokens of all requests, request-major
  int32_t num_heads = 16;  // H: query heads (8, 16, 32, 64 or 128), one KV head shared by all

  const void* q = nullptr;           // [T, H, 512] FP8 E4M3, dims contiguous, 16-byte aligned
  int64_t q_token_stride = 0;        // elements between tokens (of a request), a multiple of 16
  int64_t q_head_stride = kHeadDim;  // elements between heads, a multiple of 16
  int64_t q_request_stride = 0;      // elements between requests of a [B, q_len] view (section 1's rule); 0: flat

  KvPool swa_kv;         // FP8 E4M3 rows named by swa_rows
  KvPool compressed_kv;  // FP8 E4M3 pages named by block_table; its page_size is the stream's

  // Sliding-window stream.
  const int32_t* swa_rows = nullptr;  // [T, 128] absolute rows of swa_kv, 16-byte aligned
  int64_t swa_rows_stride = kSwaColumns;  // elements between tokens, >= 128, a multiple of 4
  int64_t swa_rows_request_stride = 0;    // elements between requests of a [B, q_len] view, a multiple of 4; 0: flat
  const int32_t* swa_lens = nullptr;  // [T] active window columns, 0..128 (clamped to it)
  int64_t swa_lens_token_stride = 1;    // elements between tokens (0: one value for all), >= 0
  int64_t swa_lens_request_stride = 0;  // elements between requests of a [B, q_len] view; 0: flat

  // Compressed stream.
  const int32_t* block_table = nullptr;  // [T, max_pages] page ids of compressed_kv, 4-byte aligned
  int32_t max_pages = 0;                 // pages a table row holds, >= 1
  int64_t block_table_stride = 0;        // elements between tokens, >= max_pages
  int64_t block_table_request_stride = 0;  // elements between requests of a [B, q_len] view; 0: flat
  const int32_t* lens = nullptr;         // [T] 128 + compressed slots the token attends
  int64_t lens_token_stride = 1;         // elements between tokens (0: one value for all), >= 0
  int64_t lens_request_stride = 0;       // elements between requests of a [B, q_len] view; 0: flat

  // Requests: hca_seq_lens bounds the compressed slots of their tokens.
  const int32_t* hca_seq_lens = nullptr;    // [B] 128 + backing compressed slots of each request
  int32_t num_requests = 0;                 // B, >= 1
  const int32_t* cum_seq_lens_q = nullptr;  // optional [B + 1]: varlen query offsets
  int32_t q_len = 0;                        // uniform query length (>= 1) without cum_seq_lens_q
  int32_t max_q_len = 0;                    // max query length (>= 1) with cum_seq_lens_q

  float bmm1_scale = 1.0f;       // applied to q.k; not NaN
  float bmm2_scale = 1.0f;       // applied to the output; not NaN
  const float* sinks = nullptr;  // optional [H] float32 attention sink logits
  SinkTerm sink_term = SinkTerm::kInOutput;  // what the sinks add (merging partials: types.h)

  void* out = nullptr;                 // [T, H, 512] bfloat16, dims contiguous, 16-byte aligned
  int64_t out_token_stride = 0;        // elements between tokens, >= (H - 1) * out_head_stride + 512
  int64_t out_head_stride = kHeadDim;  // elements between heads, >= 512, a multiple of 8
  int64_t out_request_stride = 0;      // elements between requests of a [B, q_len] view; 0: flat

  float* lse = nullptr;          // optional [T, H] float32: natural-log sum of exp of the scores (sink_term)
  int64_t lse_token_stride = 0;  // elements between tokens (heads contiguous), >= H with lse
  int64_t lse_request_stride = 0;  // elements between requests of a [B, q_len] view; 0: flat

  int32_t* out_of_range_count = nullptr;  // optional [1]: += active rows/slots whose row or page is past its pool

  bool enable_pdl = false;  // programmatic dependent launch (device memory only)
};

// Checks every argument that the host can check. InvalidArgument names the
// argument and the expected value.
Status validate(const Dsv4HcaDecodeArgs& args);

// validate(), then whether a path of this build serves the call. Host memory
// runs the CPU backend. Device memory runs the GPU path: section 1's kernels
// reading the columns from the metadata, on the rows of the expansion into a
// section-1 table [T, W'] (W' = 128 + max_pages * page_size rounded up to a
// multiple of 4), with no table in memory (docs/formats/hca_layout.md).
// NotSupported when max_pages * compressed_kv.page_size > 16384 (section 1's
// widest table), when compressed_kv has more than INT32_MAX rows, or where
// section 1's kernels cannot serve that call (no sm_90 device, grid size).
// T = 0: Ok.
Status supports(const Dsv4HcaDecodeArgs& args);

// Bytes of scratch memory that dsv4_decode_hca asks for: 0 for host memory,
// T = 0 and arguments that fail validate() or supports()' width and row
// limits; else section 1's workspace_size on the same rows (the split
// kernel's scratch: it depends on the current device, ask with the arguments
// of the call; 0 without a device). Saturates at SIZE_MAX.
size_t workspace_size(const Dsv4HcaDecodeArgs& args);

// Runs the decode (host memory: synchronously on the CPU, `stream` and the
// workspace ignored). Device memory: on `stream`, with no allocation and no
// host synchronization (CUDA-graph safe); the workspace (device memory,
// 16-byte aligned, contents ignored, overwritten) serves the split path as
// in dsv4_decode: where it is null, smaller than workspace_size(args) or
// misaligned, the call runs without the split path (same bits).
// With enable_pdl the kernels read `sinks` before waiting for the previous
// kernel, as section 1's do. Nothing is written when it fails.
Status dsv4_decode_hca(const Dsv4HcaDecodeArgs& args, void* workspace, size_t workspace_bytes,
                       CUstream_st* stream);

}  // namespace sparse_decode
