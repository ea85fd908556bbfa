// Merging partial attention results across ranks (docs/spec.md, section 5).
//
// Decode context parallelism: rank r of R attends over the KV rows it holds
// and returns its normalized output out_r [T, H, D] and the natural-log sum
// of exp of its scores lse_r [T, H] (-inf where the rank has no active row for
// the token; section 1's `lse`). For every token and head, in rank order:
//
//   L   = log(sum_r exp(lse_r))          computed as m + log(sum_r exp(lse_r - m)),
//                                        m the largest lse_r: no overflow
//   out = sum_r exp(lse_r - L) * out_r   r = 0, 1, ..., R - 1
//
// An empty partial (lse_r = -inf) contributes nothing: its out_r is never
// used and may hold anything, NaN included. A token and head empty on every
// rank gets out = 0 and L = -inf. An lse of +inf or NaN makes that token and
// head NaN. One non-empty rank gives its out_r back exactly (weight 1).
//
// FlashInfer's merge_state, merge_states and merge_state_in_place compute the
// same merge; where they differ (docs/kernels/merge.md):
// - their lse is base 2 (log2 of the sum of 2^(score * log2 e)): multiply it
//   by ln 2 for this call, and the merged lse by 1 / ln 2 for theirs;
// - merge_states takes v [T, R, H, D] and s [T, R, H]: pass partial_base with
//   partial_rank_stride = H * D and partial_token_stride = R * H * D (lse_base
//   likewise); merge_state's two [T, H, D] inputs are `partials` with R = 2;
// - they take FP16 or BF16 partials and write the partials' dtype; here BF16
//   or float32 partials and a BF16 or float32 output, chosen independently;
// - their head dim is 64, 128, 256 or 512 and every array is contiguous;
//   here any multiple of 8 and any strides with 16-byte aligned head rows;
// - every state empty gives NaN there (-inf - -inf), zeros and -inf here;
// - merge_state_in_place overwrites its first input; here out and out_lse
//   must not overlap any input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/status.h"
#include "sparse_decode/types.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode {

inline constexpr int kMergeMaxRanks = 64;    // most partial results one call merges
inline constexpr int kMergeDimMultiple = 8;  // head_dim is a multiple of this (16 bytes of BF16)

// The element type of the partial outputs and of the merged output.
enum class MergeDType : int32_t {
  kBFloat16 = 0,  // 2 bytes an element
  kFloat32 = 1,   // 4 bytes an element
};

struct MergeStatesArgs {
  MemorySpace memory = MemorySpace::kDevice;  // of every array (the pointer lists are host arrays either way)
  int32_t num_ranks = 0;        // R: partial results, 1..kMergeMaxRanks
  int64_t num_tokens = 0;       // T: query tokens, >= 0
  int32_t num_heads = 16;       // H: query heads, >= 1
  int32_t head_dim = kHeadDim;  // D: dims a head, a multiple of 8

  // The partial outputs, either as R pointers or as one base and a rank
  // stride (exactly one of `partials` and `partial_base`); every rank shares
  // the token and head strides. Pointers are 16-byte aligned, strides >= 0
  // and multiples of 16 bytes: every head row starts 16-byte aligned.
  MergeDType partial_dtype = MergeDType::kBFloat16;  // of every partial
  const void* const* partials = nullptr;   // host array [R] of pointers, each [T, H, D] of partial_dtype
  const void* partial_base = nullptr;      // [R, T, H, D] of partial_dtype (with partials null)
  int64_t partial_rank_stride = 0;         // elements between ranks (partial_base only)
  int64_t partial_token_stride = 0;        // elements between tokens
  int64_t partial_head_stride = kHeadDim;  // elements between heads (dims contiguous)

  // The natural-log sums of exp, likewise: R pointers or a base (exactly one
  // of `lses` and `lse_base`); any strides >= 0 ([H, T] layouts included).
  const float* const* lses = nullptr;  // host array [R] of pointers, each [T, H] float32, 4-byte aligned
  const float* lse_base = nullptr;     // [R, T, H] float32 (with lses null)
  int64_t lse_rank_stride = 0;         // elements between ranks (lse_base only)
  int64_t lse_token_stride = 0;        // elements between tokens
  int64_t lse_head_stride = 1;         // elements between heads

  // The merged output: its head rows must not overlap each other or any input.
  MergeDType out_dtype = MergeDType::kBFloat16;  // of out, independent of partial_dtype
  void* out = nullptr;                 // [T, H, D] of out_dtype, dims contiguous, 16-byte aligned
  int64_t out_token_stride = 0;        // elements between tokens, a multiple of 16 bytes
  int64_t out_head_stride = kHeadDim;  // elements between heads, a multiple of 16 bytes

  float* out_lse = nullptr;          // optional [T, H] float32: L (natural log), -inf where every rank is empty
  int64_t out_lse_token_stride = 0;  // elements between tokens
  int64_t out_lse_head_stride = 1;   // elements between heads

  bool enable_pdl = false;  // programmatic dependent launch (device memory only)

  // Rank r's partial output [T, H, D] and lse [T, H], from the pointer list or the base.
  const void* partial_of(int r) const {
    if (partials) return partials[r];
    const int64_t bytes = partial_dtype == MergeDType::kFloat32 ? 4 : 2;
    return static_cast<const char*>(partial_base) + r * partial_rank_stride * bytes;
  }
  const float* lse_of(int r) const { return lses ? lses[r] : lse_base + r * lse_rank_stride; }
};

// Checks every argument that the host can check (the pointer lists are read).
// InvalidArgument names the argument and the expected value.
Status validate(const MergeStatesArgs& args);

// validate(), then whether a path of this build serves the call: host
// memory runs the fp64 CPU backend; device memory the GPU kernel on an
// sm_90 device, for T * H * D / 8 <= 2^31 - 1 (NotSupported says why not).
// T == 0 launches nothing.
Status supports(const MergeStatesArgs& args);

// Merges on `stream` (ignored for host memory, which runs synchronously on
// the CPU). No workspace, no allocation, no host synchronization: safe to
// capture in a CUDA graph (the pointers of the lists are copied into the
// launch, so a captured graph keeps them). Deterministic: the same inputs
// give the same bits, run after run. Nothing is launched or written when it
// fails.
Status merge_states(const MergeStatesArgs& args, CUstream_st* stream);

}  // namespace sparse_decode
