// The online softmax of the packed cluster kernel, one chunk at a time.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "dsv4_packed/steps/cluster/common.cuh"
#include "dsv4_packed/steps/cluster/score.cuh"

namespace sparse_decode::dsv4_packed::cluster {

// Scores, then the online softmax of the chunk: the warps' maxima meet in
// shared memory (barrier), each warp writes the probabilities of its columns
// as hi + lo BF16 (BF16 alone costs up to 3.6e-3 of relative error where the
// weighted rows cancel) and its sums (barrier). Returns the factor by which
// the output so far is rescaled, per head of the fragment.
__device__ __forceinline__ float2 softmax_chunk(ClusterSmem& s, SoftmaxState& state, uint32_t mask,
                                                float scale_log2) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = lane / 4, column = warp * Traits::kColumnsPerWarp + 2 * (lane % 4);
  float d[4];
  score_columns(s, d);
  const bool live0 = (mask >> (2 * (lane % 4))) & 1u, live1 = (mask >> (2 * (lane % 4) + 1)) & 1u;
  float v[4] = {live0 ? d[0] * scale_log2 : -INFINITY, live1 ? d[1] * scale_log2 : -INFINITY,
                live0 ? d[2] * scale_log2 : -INFINITY, live1 ? d[3] * scale_log2 : -INFINITY};
  float warp_max[2] = {fmaxf(v[0], v[1]), fmaxf(v[2], v[3])};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    warp_max[h] = fmaxf(warp_max[h], __shfl_xor_sync(0xffffffffu, warp_max[h], 1));
    warp_max[h] = fmaxf(warp_max[h], __shfl_xor_sync(0xffffffffu, warp_max[h], 2));
  }
  if (lane % 4 == 0) s.warp_max[head][warp] = warp_max[0], s.warp_max[head + 8][warp] = warp_max[1];
  __syncthreads();
  float base[2], factor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float4 m0 = *reinterpret_cast<const float4*>(&s.warp_max[head + 8 * h][0]);
    const float4 m1 = *reinterpret_cast<const float4*>(&s.warp_max[head + 8 * h][4]);
    const float chunk_max = fmaxf(fmaxf(fmaxf(m0.x, m0.y), fmaxf(m0.z, m0.w)), fmaxf(fmaxf(m1.x, m1.y), fmaxf(m1.z, m1.w)));
    const float new_max = fmaxf(state.max[h], chunk_max);
    base[h] = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
    factor[h] = ptx::exp2_approx(state.max[h] - base[h]);  // 0 while the max is -inf
    state.max[h] = new_max;
  }
  float p[4], part[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = ptx::exp2_approx(v[i] - base[i / 2]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const __nv_bfloat162 hi = __floats2bfloat162_rn(p[2 * h], p[2 * h + 1]);
    const float2 rounded = __bfloat1622float2(hi);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(p[2 * h] - rounded.x, p[2 * h + 1] - rounded.y);
    *reinterpret_cast<__nv_bfloat162*>(&s.probs.hi[head + 8 * h][column]) = hi;
    *reinterpret_cast<__nv_bfloat162*>(&s.probs.lo[head + 8 * h][column]) = lo;
    part[h] = p[2 * h] + p[2 * h + 1];
    part[h] += __shfl_xor_sync(0xffffffffu, part[h], 1);
    part[h] += __shfl_xor_sync(0xffffffffu, part[h], 2);
  }
  if (lane % 4 == 0) s.warp_sum[head][warp] = part[0], s.warp_sum[head + 8][warp] = part[1];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float chunk_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < Traits::kWarps; ++w) chunk_sum += s.warp_sum[head + 8 * h][w];  // fixed order
    state.sum[h] = state.sum[h] * factor[h] + chunk_sum;
  }
  return make_float2(factor[0], factor[1]);
}

}  // namespace sparse_decode::dsv4_packed::cluster
