// The online softmax of a chunk: scaled scores, the running statistics of
// its column group, and the rounded probabilities that P V multiplies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {

// Rounds 4 probabilities for P V and stores them at probs[..][head][column]:
// FP16 for FP8 rows, BF16 hi + lo for BF16 rows. Returns their sum as P V
// multiplies them ((p0 + p1) + (p2 + p3); hi + lo is exact in FP32).
template <class Traits>
__device__ __forceinline__ float store_probabilities(ChunkSmem<Traits>& s, int head, int column, const float (&p)[4],
                                                   int slot) {
  if constexpr (!Traits::kBf16) {
    const __half2 p01 = __floats2half2_rn(p[0], p[1]), p23 = __floats2half2_rn(p[2], p[3]);
    *reinterpret_cast<uint2*>(&s.probs[slot][0][head][column]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&p01), *reinterpret_cast<const uint32_t*>(&p23));
    const float2 f01 = __half22float2(p01), f23 = __half22float2(p23);
    return (f01.x + f01.y) + (f23.x + f23.y);
  } else {
    const __nv_bfloat162 hi01 = __floats2bfloat162_rn(p[0], p[1]), hi23 = __floats2bfloat162_rn(p[2], p[3]);
    const float2 h01 = __bfloat1622float2(hi01), h23 = __bfloat1622float2(hi23);
    const __nv_bfloat162 lo01 = __floats2bfloat162_rn(__fsub_rn(p[0], h01.x), __fsub_rn(p[1], h01.y));
    const __nv_bfloat162 lo23 = __floats2bfloat162_rn(__fsub_rn(p[2], h23.x), __fsub_rn(p[3], h23.y));
    *reinterpret_cast<uint2*>(&s.probs[slot][0][head][column]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&hi01), *reinterpret_cast<const uint32_t*>(&hi23));
    *reinterpret_cast<uint2*>(&s.probs[slot][1][head][column]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo01), *reinterpret_cast<const uint32_t*>(&lo23));
    const float2 l01 = __bfloat1622float2(lo01), l23 = __bfloat1622float2(lo23);
    const float e0 = __fadd_rn(h01.x, l01.x), e1 = __fadd_rn(h01.y, l01.y);
    const float e2 = __fadd_rn(h23.x, l23.x), e3 = __fadd_rn(h23.y, l23.y);
    return __fadd_rn(__fadd_rn(e0, e1), __fadd_rn(e2, e3));
  }
}

// Online softmax over the chunk: kSoftmaxThreads threads a head (16 at 16
// heads, 4 at 64), kSoftmaxColumns columns each (4, 16). Writes the rounded
// probabilities and the group's running statistics (restarted at the first
// chunk of a group) into chunk slot `slot`; the statistics so far are the
// previous slot's.
template <class Traits>
__device__ __forceinline__ void softmax_chunk(ChunkSmem<Traits>& s, int kv_tile, float scale_log2, bool group_start,
                                              int slot) {
  static_assert(Traits::kWarpgroups == 2, "the score is the sum of the two warpgroups' halves");
  constexpr int kThreadsPerHead = Traits::kSoftmaxThreads, kColumns = Traits::kSoftmaxColumns;
  const int head = threadIdx.x / kThreadsPerHead, part = threadIdx.x % kThreadsPerHead;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask[kv_tile]) >> (part * kColumns);
  float v[kColumns];
#pragma unroll
  for (int quad = 0; quad < kColumns / 4; ++quad) {
    const float4 lo = *reinterpret_cast<const float4*>(&s.scores[slot][0][head][part * kColumns + 4 * quad]);
    const float4 hi = *reinterpret_cast<const float4*>(&s.scores[slot][1][head][part * kColumns + 4 * quad]);
    // Explicit roundings (no contraction): all kernels must do the same float operations.
    v[4 * quad + 0] = __fmul_rn(__fadd_rn(lo.x, hi.x), scale_log2);
    v[4 * quad + 1] = __fmul_rn(__fadd_rn(lo.y, hi.y), scale_log2);
    v[4 * quad + 2] = __fmul_rn(__fadd_rn(lo.z, hi.z), scale_log2);
    v[4 * quad + 3] = __fmul_rn(__fadd_rn(lo.w, hi.w), scale_log2);
  }
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    if (!((mask >> i) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
#pragma unroll
  for (int offset = 1; offset < kThreadsPerHead; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  const int previous = (slot + Traits::kChunkSlots - 1) % Traits::kChunkSlots;
  const float old_max = group_start ? -INFINITY : s.running_max[previous][head];
  const float old_sum = group_start ? 0.0f : s.running_sum[previous][head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  // The denominator sums what P V multiplies: ((quad 0 + quad 1) + quad 2) + ...
  float sum = 0.0f;
#pragma unroll
  for (int quad = 0; quad < kColumns / 4; ++quad) {
    const float probabilities[4] = {ptx::exp2_approx(__fsub_rn(v[4 * quad + 0], base)),
                                    ptx::exp2_approx(__fsub_rn(v[4 * quad + 1], base)),
                                    ptx::exp2_approx(__fsub_rn(v[4 * quad + 2], base)),
                                    ptx::exp2_approx(__fsub_rn(v[4 * quad + 3], base))};
    const float quad_sum = store_probabilities<Traits>(s, head, part * kColumns + 4 * quad, probabilities, slot);
    sum = quad == 0 ? quad_sum : __fadd_rn(sum, quad_sum);
  }
#pragma unroll
  for (int offset = 1; offset < kThreadsPerHead; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncwarp();
  if (part == 0) {
    const float factor = ptx::exp2_approx(__fsub_rn(old_max, base));  // 0 while old_max is -inf
    s.rescale[slot][head] = factor;
    s.running_sum[slot][head] = __fmaf_rn(old_sum, factor, sum);
    s.running_max[slot][head] = new_max;
  }
}

}  // namespace sparse_decode::dsv4
