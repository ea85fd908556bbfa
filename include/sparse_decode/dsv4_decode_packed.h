// DeepSeek-V4 sparse MLA decode on packed 584-byte rows (docs/spec.md, section 2).
//
// The `fp8_ds_mla` layout of FlashMLA's "MODEL1" kernels, of vLLM and SGLang
// on Hopper, and of FlashInfer's SM120 path: each KV row is 448 FP8 E4M3 dims
// in 7 tiles of 64 with one UE8M0 scale per tile, plus 64 BF16 dims. A page
// holds page_size rows' 576 data bytes, then their 8 scale bytes each:
//
//   page p:  [slot 0 data 576 B][slot 1 data]...[slot page_size-1 data]
//            [slot 0 scales 8 B][slot 1 scales]...   (then padding up to page_stride)
//
// Each query token attends two segments, each with its own pool, indices and
// lengths: the sliding-window (SWA) segment and an optional extra
// (compressed) segment. This is FlashInfer's SM120 argument set
// (sparse_indices + swa_topk_lens, extra_sparse_indices +
// extra_sparse_topk_lens) and FlashMLA's (indices + topk_length,
// extra_indices_in_kvcache + extra_topk_length).
//
// The names of section 1 are overloaded (validate, supports,
// workspace_size); the call itself is dsv4_decode_packed. See
// docs/formats/packed_layout.md for the layout and the decisions behind the checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/status.h"
#include "sparse_decode/types.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode {

inline constexpr int kPackedRowBytes = 584;    // bytes of pool a row takes: data + scales
inline constexpr int kPackedDataBytes = 576;   // 448 FP8 bytes + 64 BF16 values
inline constexpr int kPackedScaleBytes = 8;    // 7 UE8M0 tile scales + 1 padding byte
inline constexpr int kPackedFp8Dims = 448;     // dims 0..447 are FP8 E4M3, scaled per tile
inline constexpr int kPackedTileDims = 64;     // dims a scale byte covers
inline constexpr int kPackedTiles = 7;         // kPackedFp8Dims / kPackedTileDims
inline constexpr int32_t kPackedMaxWidth = 16384;  // most columns of one segment

// Which GPU kernel serves a packed call (docs/kernels/packed.md). Unlike
// Dsv4Kernel's, these kernels split a token's columns differently: their
// results agree within the accuracy bound, not bit for bit.
enum class Dsv4PackedKernel : int32_t {
  kAuto = 0,
  kCluster = 1,  // a thread-block cluster a (token, 16-head group): small batches
  kStream = 2,   // one or two CTAs a (token, 16-head group) walking its rows: large batches
  kSplit = 3,    // a CTA a run of chunks, shares combined through the workspace: small and middle batches
  kStreamH64 = 4,  // one CTA a (token, 64-head group) on one gathered tile: 64 and 128 heads, large batches
  kSplitH64 = 5,   // kStreamH64's CTAs on runs of chunks, shares combined through the workspace: 64 and 128 heads, middle batches
};

// A pool of packed rows. Row r is page r / page_size, slot r % page_size.
// FlashMLA's k_cache [pages, page_size, 1, 584] uint8 is this with
// page_stride = its stride(0) (page_size * 584 when contiguous).
struct PackedPool {
  const uint8_t* data = nullptr;  // [pages, page_stride] bytes, 16-byte aligned
  int64_t pages = 0;              // number of pages, >= 1
  int64_t page_size = 1;          // rows (slots) per page, >= 1, any value
  int64_t page_stride = 0;        // bytes between pages, >= page_size * 584, a multiple of 16

  int64_t rows() const { return pages * page_size; }
};

// One segment of columns: for token t, column c names row
// indices[t * indices_stride + c] of `pool`. Column c is active iff
// c < lens[t], the index is >= 0 and the index is < pool.rows().
struct PackedSegment {
  PackedPool pool;
  const int32_t* indices = nullptr;  // [T, width] int32 rows of `pool`, -1 = unused; 16-byte aligned
  int32_t width = 0;                 // W_seg: columns per token, 1..16384
  int64_t indices_stride = 0;        // elements between tokens (of a request), >= width, a multiple of 4
  const int32_t* lens = nullptr;     // [T] int32 active columns per token (c >= lens[t] inactive);
                                     // optional for the SWA segment (null: all `width` columns),
                                     // required for the extra segment
  int64_t indices_request_stride = 0;  // elements between requests of a [B, q_len] view, a multiple of 4; 0: flat
  int64_t lens_token_stride = 1;       // elements between tokens of lens (0: one value for all), >= 0
  int64_t lens_request_stride = 0;     // elements between requests of a [B, q_len] view of lens; 0: flat

  // Whether any field is set. The extra segment is present iff this is true;
  // a partly set one is refused, naming what is missing.
  bool given() const {
    return width != 0 || indices != nullptr || lens != nullptr || pool.data != nullptr || pool.pages != 0;
  }
};

// q, out, lse and each segment's indices and lens may be [B, q_len, ...]
// request views as in section 1 (dsv4_decode.h, "Request views"): a
// nonzero *_request_stride needs the uniform q_len and num_requests
// (cum_seq_lens_q null, num_tokens = num_requests * q_len).
struct Dsv4PackedDecodeArgs {
  MemorySpace memory = MemorySpace::kDevice;
  int64_t num_tokens = 0;   // T: query tokens of all requests, request-major
  int32_t num_heads = 16;   // H: query heads (8, 16, 32, 64 or 128), one KV head shared by all

  const void* q = nullptr;           // [T, H, 512] bfloat16, dims contiguous, 16-byte aligned
  int64_t q_token_stride = 0;        // elements between tokens (of a request), a multiple of 8
  int64_t q_head_stride = kHeadDim;  // elements between heads, a multiple of 8
  int64_t q_request_stride = 0;      // elements between requests of a [B, q_len] view, a multiple of 8; 0: flat

  PackedSegment swa;    // the sliding-window segment: required
  PackedSegment extra;  // the extra (compressed) segment: optional, all fields zero/null when absent

  // Optional sliding-window validity of the SWA segment from the KV length
  // of each request (section 1's rule): with seq_lens, token i of request b
  // sits at position p = seq_lens[b] - q_len_b + i, and SWA column c < 128
  // is active only if c < min(128, p + 1); columns from 128 on are not
  // touched by it. The requests also give q_len and num_requests to
  // request views.
  const int32_t* seq_lens = nullptr;        // optional [B]: KV length of each request
  int32_t num_requests = 0;                 // B, required with seq_lens or a request stride
  const int32_t* cum_seq_lens_q = nullptr;  // optional [B + 1]: varlen query offsets (with seq_lens)
  int32_t q_len = 0;                        // uniform query length (>= 1) without cum_seq_lens_q
  int32_t max_q_len = 0;                    // max query length (>= 1) with cum_seq_lens_q

  float softmax_scale = 1.0f;  // applied to q.k (bmm1 of section 1; bmm2 is 1); not NaN
  const float* sinks = nullptr;  // optional [H] float32 attention sink logits
  SinkTerm sink_term = SinkTerm::kInOutput;  // what the sinks add (merging partials: types.h)

  void* out = nullptr;                 // [T, H, 512] bfloat16, dims contiguous, 16-byte aligned
  int64_t out_token_stride = 0;        // elements between tokens, >= (H - 1) * out_head_stride + 512
  int64_t out_head_stride = kHeadDim;  // elements between heads, >= 512, a multiple of 8
  int64_t out_request_stride = 0;      // elements between requests of a [B, q_len] view, a multiple of 8; 0: flat

  float* lse = nullptr;          // optional [T, H] float32: natural-log sum of exp of the scores (sink_term)
  int64_t lse_token_stride = 0;  // elements between tokens (heads contiguous), >= H with lse
  int64_t lse_request_stride = 0;  // elements between requests of a [B, q_len] view; 0: flat

  int32_t* out_of_range_count = nullptr;  // optional [1]: += active columns whose index is past its pool

  // Programmatic dependent launch (device memory only). The kernels then read
  // `sinks` before waiting for the previous kernel (they are weights): the
  // previous kernel must not write them; everything else is read after.
  bool enable_pdl = false;

  // Device memory only: which kernel runs. kAuto picks by the batch (units:
  // (token, 16-head group) pairs; chunks: 64 columns of a token). At 64 and
  // 128 heads and W <= 640, before the rest: kStreamH64 from 67 (token,
  // 64-head group) units (T = 67 at 64 heads, 34 at 128); with the
  // workspace, kSplitH64 from 34 units at W > 384. With the
  // workspace of workspace_size(), the split path where it measured fastest:
  // at W = 128 up to 64 units, W = 256 to 640 up to 32, W = 1152 up to 48
  // and 67-132, wider tokens up to 132. Otherwise the cluster kernel
  // up to 16 units (W > 128), the stream kernel beyond, with two CTAs a unit
  // up to 66 units. kCluster, kStream and kSplit force one
  // (docs/kernels/packed.md; a forced kSplit needs the workspace).
  // kStreamH64 (num_heads 64 or 128) reads each row once a 64-head group
  // instead of once a 16-head group; kSplitH64 spreads a 64-head unit's
  // chunks over up to 16 such CTAs (a forced kSplitH64 needs the
  // workspace). The kernels
  // give results within the accuracy bound but not the same bits.
  Dsv4PackedKernel kernel = Dsv4PackedKernel::kAuto;

  // Device memory only: a token's output bits do not depend on the other
  // tokens, their number or the head count's grouping into kernels. kAuto
  // then runs the stream kernel with one CTA a (token, 16-head group) at
  // every batch, and a forced kStream does too (kStreamH64, one CTA a
  // (token, 64-head group), is invariant as it is); kCluster, kSplit and
  // kSplitH64 are refused. Off by default: small batches lose the split path, the cluster
  // kernel and the pair (W = 128, T = 1: 9.0 µs against 7.4), 64 and 128
  // heads the 64-head form (docs/kernels/packed.md, "Bits").
  bool batch_invariant = false;
};

// Checks every argument that the host can check. InvalidArgument names the
// argument and the expected value.
Status validate(const Dsv4PackedDecodeArgs& args);

// validate(), then whether a path of this build serves the call (NotSupported
// says why not). Host memory runs the CPU backend; device memory the GPU
// kernel (docs/kernels/packed.md), on an sm_90a device.
Status supports(const Dsv4PackedDecodeArgs& args);

// Bytes of scratch memory that dsv4_decode_packed needs for these arguments:
// the split paths' (small batches on the GPU, or a forced kSplit or
// kSplitH64), else 0. Without it kAuto runs another kernel; a forced kSplit
// or kSplitH64 is refused.
size_t workspace_size(const Dsv4PackedDecodeArgs& args);

// Runs the decode on `stream` (ignored for host memory, which runs
// synchronously on the CPU). No allocation on the device, no host
// synchronization. Nothing is launched or written when it fails. The same
// arguments give the same bits run after run; a token's bits depend on the
// two segment widths and on T x head groups (they decide how its columns are
// split and summed), not on the other tokens' values; with batch_invariant
// on the widths alone.
Status dsv4_decode_packed(const Dsv4PackedDecodeArgs& args, void* workspace, size_t workspace_bytes,
                          CUstream_st* stream);

}  // namespace sparse_decode
