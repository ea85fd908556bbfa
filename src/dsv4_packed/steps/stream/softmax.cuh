// The online softmax of the packed stream kernel, one chunk at a time.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "dsv4_packed/steps/stream/common.cuh"

namespace sparse_decode::dsv4_packed::stream {

// The least P of an active column: 2^-126, the least normal float.
inline constexpr float kMinProbability = 1.17549435e-38f;

// Online softmax over the chunk, 16 threads a head, 4 columns each: P in
// FP32 (the P V warps round it), the running statistics and the rescale
// factor of O.
__device__ __forceinline__ void softmax_chunk(Smem& s, int buffer, bool first) {
  constexpr int kColumns = Traits::kSoftmaxColumns;
  const int head = threadIdx.x / Traits::kSoftmaxThreads, part = threadIdx.x % Traits::kSoftmaxThreads;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask[buffer]) >> (part * kColumns);
  const float4 lo = *reinterpret_cast<const float4*>(&s.scores[0][head][part * kColumns]);
  const float4 hi = *reinterpret_cast<const float4*>(&s.scores[1][head][part * kColumns]);
  const float factor = s.score_factor[head];
  float v[kColumns] = {(lo.x + hi.x) * factor, (lo.y + hi.y) * factor, (lo.z + hi.z) * factor,
                       (lo.w + hi.w) * factor};
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    if (!((mask >> i) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
#pragma unroll
  for (int offset = 1; offset < Traits::kSoftmaxThreads; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  const float old_max = first ? -INFINITY : s.running_max[head];
  const float old_sum = first ? 0.0f : s.running_sum[head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  // An active column's P is at least 2^-126 (a normal float: P V's keys
  // need its exponent); a masked column's is 0.
  auto probability = [&](int i) {
    return (mask >> i) & 1u ? fmaxf(ptx::exp2_approx(v[i] - base), kMinProbability) : 0.0f;
  };
  const float4 prob = make_float4(probability(0), probability(1), probability(2), probability(3));
  *reinterpret_cast<float4*>(&s.probs[head][part * kColumns]) = prob;
  float sum = (prob.x + prob.y) + (prob.z + prob.w);
#pragma unroll
  for (int offset = 1; offset < Traits::kSoftmaxThreads; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncwarp();  // every lane has read the old statistics
  if (part == 0) {
    const float rescale = ptx::exp2_approx(old_max - base);  // 0 while old_max is -inf
    s.rescale[head] = rescale;
    s.running_sum[head] = __fmaf_rn(old_sum, rescale, sum);
    s.running_max[head] = new_max;
  }
}

}  // namespace sparse_decode::dsv4_packed::stream
