// The 64-head split path (kSplitH64): each CTA's share of its unit, written
// to the workspace (split_h64_workspace.cuh) for the combine kernel.
#pragma once

#include <cstdint>

#include "dsv4_packed/params.h"
#include "dsv4_packed/split_h64_workspace.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

__device__ __forceinline__ uint8_t* share_record(const Params& p, int64_t share) {
  return p.workspace + share * SplitH64Workspace::kShareBytes;
}

// A warpgroup's O (dims first_dim .. first_dim + 255 of the thread's two
// heads) into share `share`: a quad of lanes writes 32 contiguous bytes of
// a head's row.
template <int kValues>
__device__ __forceinline__ void write_share_dims(const Params& p, int64_t share, const float (&o)[kValues],
                                                 int first_dim) {
  static_assert(kValues * 2 == Traits::kHalfDims, "a warpgroup's 256 dims, 2 heads a thread");
  float* values = reinterpret_cast<float*>(share_record(p, share));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float* row = values + fragment_row(h) * kHeadDim + first_dim + 2 * (threadIdx.x % 4);
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
      *reinterpret_cast<float2*>(row + 8 * j) = make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
  }
}

// Warpgroup 0: each head's scale exponent and statistics (max, sum).
__device__ __forceinline__ void write_share_stats(const Params& p, int64_t share, const int (&exponent)[2],
                                                  const float (&max)[2], const float (&sum)[2]) {
  if (threadIdx.x % 4 != 0) return;
  uint8_t* record = share_record(p, share);
  int32_t* exponents = reinterpret_cast<int32_t*>(record + SplitH64Workspace::kValueBytes);
  float2* stats =
      reinterpret_cast<float2*>(record + SplitH64Workspace::kValueBytes + SplitH64Workspace::kExponentBytes);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    exponents[fragment_row(h)] = exponent[h];
    stats[fragment_row(h)] = make_float2(max[h], sum[h]);
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
