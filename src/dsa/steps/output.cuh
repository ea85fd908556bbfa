// The end of a split: the warps' sums and P V added in warp order, then
// the gated BF16 output (one split) or the split's normalized output and
// log-sum-exp (more); and the BF16 store both kernels use.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/math.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"
#include "dsa/steps/convert.cuh"
#include "dsa/steps/gate.cuh"
#include "dsa/steps/softmax.cuh"

namespace sparse_decode::dsa {

// Stores 4 dims of an output head as BF16 (rounded once, after the gate).
__device__ __forceinline__ void store_out4(uint16_t* dst, float4 v) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
}

// Zeroes the row's output: an inactive row with one split (with more, the
// combine zeroes it). kThreads: the CTA's.
template <int kThreads>
__device__ __forceinline__ void clear_row(const DsaParams& p, int64_t row) {
  using T = TileTraits;
  for (int x = threadIdx.x; x < p.heads * T::kGranules; x += kThreads) {
    store_out4(p.out + row * p.out_row_stride + (x / T::kGranules) * p.out_head_stride + (x % T::kGranules) * 4,
               make_float4(0.0f, 0.0f, 0.0f, 0.0f));
  }
}

// The split kernel's end of the walk: the sums of each thread's 4 shares,
// then each warp's sums, warp 0's maxima and each warp's dims of P V
// (24w + 8n + 2t and + 1 of heads g and g + 8 a lane) into the reduce
// buffer, which replaces the KV tiles.
template <bool kFp8>
__device__ __forceinline__ void reduce_warps(SplitSmem<kFp8>& s, HeadPair& state,
                                             const float (&o)[SplitKernelTraits::kWarpDimTiles][4], int warp, int g,
                                             int t) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) state.sum[b] += __shfl_xor_sync(0xffffffffu, state.sum[b], offset);
  }
  __syncthreads();  // the last tile's readers are done: tiles become the reduce buffer
  if (t == 0) s.warp_sum[warp][g] = state.sum[0], s.warp_sum[warp][g + 8] = state.sum[1];
  if (warp == 0 && t == 0) s.head_max[g] = state.max[0], s.head_max[g + 8] = state.max[1];
#pragma unroll
  for (int n = 0; n < SplitKernelTraits::kWarpDimTiles; ++n) {
    const int dim = warp * SplitKernelTraits::kWarpDims + 8 * n + 2 * t;
    *reinterpret_cast<float2*>(&s.tiles.reduce[0][g][dim]) = make_float2(o[n][0], o[n][1]);
    *reinterpret_cast<float2*>(&s.tiles.reduce[0][g + 8][dim]) = make_float2(o[n][2], o[n][3]);
  }
  __syncthreads();
}

// A head's sum of exp over the split: the warps' sums in warp order.
template <class Smem>
__device__ __forceinline__ float split_sum(const Smem& s, int head) {
  float sum = s.warp_sum[0][head];
#pragma unroll
  for (int w = 1; w < std::extent_v<decltype(s.warp_sum)>; ++w) sum += s.warp_sum[w][head];
  return sum;
}

// A split's normalized output of 4 dims of `head`: the parts of P V in the
// reduce buffer (the split kernel's warps, each over its keys; the direct
// kernel's one) added in order, times the head's factor (v_scale / sum, 0
// without a visible key).
template <class Smem>
__device__ __forceinline__ float4 split_mean(const Smem& s, int head, int dim, float factor) {
  constexpr int kParts = std::extent_v<decltype(s.tiles.reduce)>;
  float4 acc = *reinterpret_cast<const float4*>(&s.tiles.reduce[0][head][dim]);
#pragma unroll
  for (int w = 1; w < kParts; ++w) {
    const float4 part = *reinterpret_cast<const float4*>(&s.tiles.reduce[w][head][dim]);
    acc.x += part.x, acc.y += part.y, acc.z += part.z, acc.w += part.w;
  }
  return make_float4(acc.x * factor, acc.y * factor, acc.z * factor, acc.w * factor);
}

__device__ __forceinline__ float mean_factor(float sum, float v_scale) { return sum > 0.0f ? v_scale / sum : 0.0f; }

// A split's natural-log sum of exp of `head` (-inf: no visible key).
template <class Smem>
__device__ __forceinline__ float split_lse(const Smem& s, int head, float sum) {
  return sum > 0.0f ? (s.head_max[head] + log2f(sum)) * kLn2 : -INFINITY;
}

// The end of a split (a CTA of kThreads): thread h < heads computes head
// h's factor, and with one split its gate (one L2 load a head, all at
// once), with more its lse; then one granule a thread: with one split the
// gated BF16 output, with more the normalized output in `partial`.
template <int kThreads, class Smem>
__device__ __forceinline__ void write_output(const DsaParams& p, Smem& s, int64_t row, int split, float v_scale) {
  using T = TileTraits;
  if (threadIdx.x < p.heads) {
    const int head = threadIdx.x;
    const float sum = split_sum(s, head);
    s.head_factor[head] = mean_factor(sum, v_scale);
    if (p.splits == 1) {
      // A row without a key stays exactly zero whatever its gate (NaN included), as the combine does.
      s.head_gate[head] = sum > 0.0f ? gate_factor(p, row, head) : 1.0f;
    } else {
      p.lse[(row * p.splits + split) * p.heads + head] = split_lse(s, head, sum);
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < p.heads * T::kGranules; x += kThreads) {
    const int head = x / T::kGranules, dim = (x % T::kGranules) * 4;
    const float4 mean = split_mean(s, head, dim, s.head_factor[head]);
    if (p.splits == 1) {
      const float gate = s.head_gate[head];
      store_out4(p.out + row * p.out_row_stride + head * p.out_head_stride + dim,
                 make_float4(mean.x * gate, mean.y * gate, mean.z * gate, mean.w * gate));
    } else {
      const int64_t entry = (row * p.splits + split) * p.heads + head;
      *reinterpret_cast<float4*>(p.partial + entry * T::kDims + dim) = mean;
    }
  }
}

}  // namespace sparse_decode::dsa
