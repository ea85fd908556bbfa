// The split path: each CTA's share of its unit, written to the workspace
// (split_workspace.cuh) for the combine kernel.
#pragma once

#include <cstdint>

#include "dsv4_packed/params.h"
#include "dsv4_packed/split_workspace.cuh"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/stream/output.cuh"

namespace sparse_decode::dsv4_packed::stream {

__device__ __forceinline__ uint8_t* share_record(const Params& p, int64_t share) {
  return p.workspace + share * SplitWorkspace::kShareBytes;
}

// After the walk: this math thread's P V values and scale exponents, and
// (threads < 16) the heads' statistics, into share `share`.
__device__ __forceinline__ void write_share(const Smem& s, const Params& p, int64_t share,
                                            const DimFragment& acc, const int (&exponent)[2]) {
  uint8_t* record = share_record(p, share);
  float4* values = reinterpret_cast<float4*>(record);
  int32_t* exponents = reinterpret_cast<int32_t*>(record + SplitWorkspace::kValueBytes);
  const int tid = threadIdx.x, warp = tid / 32;
#pragma unroll
  for (int db = 0; db < 2; ++db)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        values[((2 * db + half) * 2 + h) * Traits::kThreads + tid] = head_slice(acc, db, half, h);
      }
  // The BF16 dims (warp 7) carry no scale exponent.
  exponents[tid] = warp < Traits::kScaleTiles ? exponent[0] : 0;
  exponents[Traits::kThreads + tid] = warp < Traits::kScaleTiles ? exponent[1] : 0;
  if (tid < Traits::kHeads) {
    reinterpret_cast<float2*>(record + SplitWorkspace::kValueBytes + SplitWorkspace::kExponentBytes)[tid] =
        make_float2(s.running_max[tid], s.running_sum[tid]);
  }
}

}  // namespace sparse_decode::dsv4_packed::stream
