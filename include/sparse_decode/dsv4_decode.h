// DeepSeek-V4 sparse MLA decode on plain rows (docs/spec.md, section 1).
//
// Each query token attends its own sparse set of KV rows: columns 0..127 of
// `indices` name rows of the sliding-window pool, columns 128..W-1 rows of the
// compressed pool. One KV head of 512 dims serves as both key and value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/status.h"
#include "sparse_decode/types.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode {

// Which GPU kernel serves a call. All give the same bits for a token
// whatever the batch (docs/dispatch.md); kAuto picks the fastest by
// the number of tokens and the width. Host memory ignores it. FP8 calls with
// H = 64 or 128 and W <= 1024 run the stream and split kernels on 64-head
// tiles (docs/kernels/heads64.md): kAuto picks only between those two, and a
// forced kCluster (16-head groups) gives other bits, as accurate.
enum class Dsv4Kernel : int32_t {
  kAuto = 0,
  kCluster = 1,  // a thread-block cluster a token: small batches
  kStream = 2,   // a CTA a token walking all of its rows: large batches
  kSplit = 3,    // a CTA a group of rows, results combined through the workspace: batches in between
};

// Request views. q, indices, lens, out and lse are [T, ...] arrays, token t
// at t * (its token stride). Each may instead be a [B, q_len, ...] view
// whose two leading dims do not merge into one token stride: with a
// nonzero request stride R and token stride S, token t = b * q_len + i
// (request b, index i) sits at b * R + i * S, read or written in place. Any
// nonzero request stride needs a uniform q_len and num_requests with
// num_tokens = num_requests * q_len (cum_seq_lens_q null); a request stride
// of 0 keeps that argument flat. [B, q_len] views that do merge (R = q_len *
// S) are the flat layout and run on the plain kernels (docs/spec.md, section 1).
struct Dsv4DecodeArgs {
  MemorySpace memory = MemorySpace::kDevice;
  DType dtype = DType::kFloat8E4M3;  // of q, swa_kv and compressed_kv
  int64_t num_tokens = 0;            // T: query tokens of all requests, request-major
  int32_t num_heads = 16;            // H: query heads, one KV head shared by all

  const void* q = nullptr;         // [T, H, 512] of dtype, dims contiguous
  int64_t q_token_stride = 0;      // elements between tokens (of a request, with q_request_stride)
  int64_t q_head_stride = kHeadDim;  // elements between heads
  int64_t q_request_stride = 0;    // elements between requests of a [B, q_len] view; 0: flat

  KvPool swa_kv;         // addressed by columns 0..127
  KvPool compressed_kv;  // addressed by columns 128..W-1 (may be empty when W == 128)

  const int32_t* indices = nullptr;  // [T, W] row of the column's pool, -1 = unused
  int32_t width = 0;                 // W: >= 128, W % 4 == 0
  int64_t indices_stride = 0;        // elements between tokens, >= W
  int64_t indices_request_stride = 0;  // elements between requests of a [B, q_len] view, a multiple of 4; 0: flat

  const int32_t* lens = nullptr;  // optional [T]: active columns per token, counting the 128 SWA ones
  int64_t lens_token_stride = 1;  // elements between tokens (0: one value for all), >= 0
  int64_t lens_request_stride = 0;  // elements between requests of a [B, q_len] view; 0: flat

  // Optional sliding-window validity from the KV length of each request.
  const int32_t* seq_lens = nullptr;        // optional [B]: KV length of each request
  int32_t num_requests = 0;                 // B, required with seq_lens
  const int32_t* cum_seq_lens_q = nullptr;  // optional [B + 1]: varlen query offsets
  int32_t q_len = 0;                        // uniform query length (>= 1) without cum_seq_lens_q
  int32_t max_q_len = 0;                    // max query length (>= 1) with cum_seq_lens_q

  const float* sinks = nullptr;  // optional [H] float32 attention sink logits
  SinkTerm sink_term = SinkTerm::kInOutput;  // what the sinks add (merging partials: types.h)
  ScalarArg bmm1_scale;          // applied to q.k
  ScalarArg bmm2_scale;          // applied to the output

  void* out = nullptr;              // [T, H, 512] bfloat16, dims contiguous
  int64_t out_token_stride = 0;     // elements between tokens
  int64_t out_head_stride = kHeadDim;  // elements between heads
  int64_t out_request_stride = 0;   // elements between requests of a [B, q_len] view; 0: flat

  float* lse = nullptr;          // optional [T, H] float32: natural-log sum of exp of the scores (sink_term)
  int64_t lse_token_stride = 0;  // elements between tokens (heads contiguous)
  int64_t lse_request_stride = 0;  // elements between requests of a [B, q_len] view; 0: flat

  int32_t* out_of_range_count = nullptr;  // optional [1]: += active columns whose index is past its pool

  // Programmatic dependent launch (device memory only). The kernels then read
  // `sinks` before waiting for the previous kernel (they are weights): the
  // previous kernel must not write them; everything else is read after.
  bool enable_pdl = false;
  Dsv4Kernel kernel = Dsv4Kernel::kAuto;  // device memory only
};

// Checks every argument that the host can check. InvalidArgument names the
// argument and the expected value.
Status validate(const Dsv4DecodeArgs& args);

// validate(), then whether a path of this build serves the call (NotSupported
// says why not). Reads the current device's properties for device memory.
Status supports(const Dsv4DecodeArgs& args);

// Bytes of scratch memory that dsv4_decode needs for these arguments: nonzero
// only where the split kernel runs (kernel == kSplit, or kAuto picks it),
// 0 for host memory and for arguments that fail validate(). kAuto's pick
// depends on the current device: ask with the arguments of the call. It
// grows with T up to where kAuto leaves the split path (on an H200: 66
// 16-head units x 16 groups x 32.9 KB = 35 MB above W = 1024, or 26 64-head
// units x 16 groups x 131.6 KB = 55 MB with FP8 at H = 64, 128), so one
// buffer of 64 MiB serves every call there; a T beyond
// any buffer saturates to the largest size_t value instead of wrapping.
size_t workspace_size(const Dsv4DecodeArgs& args);

// Runs the decode on `stream` (ignored for host memory, which runs
// synchronously on the CPU). No allocation, no host synchronization: safe to
// capture in a CUDA graph. Nothing is launched or written when it fails.
// The workspace (device memory, 16-byte aligned, contents ignored) serves
// the split kernel: where kAuto would pick it but `workspace` is null,
// smaller than workspace_size(args) or misaligned, the better of the cluster
// and stream kernels runs instead (same bits, more time); a forced kSplit then fails with
// InvalidArgument naming workspace_bytes.
Status dsv4_decode(const Dsv4DecodeArgs& args, void* workspace, size_t workspace_bytes,
                   CUstream_st* stream);
}  // namespace sparse_decode
