// The online softmax of the packed stream kernel's 64-head form, one chunk
// at a time, and each (scale tile, head)'s largest P V key of the chunk.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "dsv4_packed/steps/stream/softmax.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// A warpgroup's 32 heads, 4 threads a head (lanes l, l + 8, l + 16, l + 24
// of math warp w: head 8w + l % 8, columns 16 part .. 16 part + 15), P in
// FP32 as at 16 heads (the same statistics and rescale factor). Then, for
// each scale tile, the largest key bits(P) + scale byte << 23 of the head
// over the chunk (0 without an active column), which P V turns into the
// chunk's scale exponent: found here once a head instead of once a head in
// every P V warp.
__device__ __forceinline__ void softmax_chunk(Smem& s, int buffer, bool first) {
  constexpr int kColumns = Traits::kSoftmaxColumns;
  const int lane = threadIdx.x % 32;
  const int head = 8 * (threadIdx.x / 32) + lane % 8, part = lane / 8;
  const int first_column = part * kColumns;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask[buffer]) >> first_column;
  const float factor = s.score_factor[head];
  float v[kColumns];
#pragma unroll
  for (int i = 0; i < kColumns / 4; ++i) {
    const float4 score = *reinterpret_cast<const float4*>(&s.scores[head][first_column + 4 * i]);
    v[4 * i + 0] = score.x * factor, v[4 * i + 1] = score.y * factor;
    v[4 * i + 2] = score.z * factor, v[4 * i + 3] = score.w * factor;
  }
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    if (!((mask >> i) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
  chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 8));
  chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 16));
  const float old_max = first ? -INFINITY : s.running_max[head];
  const float old_sum = first ? 0.0f : s.running_sum[head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  float prob[kColumns];
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    prob[i] = (mask >> i) & 1u ? fmaxf(ptx::exp2_approx(v[i] - base), stream::kMinProbability) : 0.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kColumns / 4; ++i) {
    *reinterpret_cast<float4*>(&s.probs[head][first_column + 4 * i]) =
        make_float4(prob[4 * i], prob[4 * i + 1], prob[4 * i + 2], prob[4 * i + 3]);
    sum += (prob[4 * i] + prob[4 * i + 1]) + (prob[4 * i + 2] + prob[4 * i + 3]);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 8);
  sum += __shfl_xor_sync(0xffffffffu, sum, 16);
  // The keys: a masked column has P = 0 and scale bits 0, key 0. The 7
  // tiles' maxima are independent chains, interleaved (one chain of 16
  // dependent maxima and 2 shuffles a tile in turn would be latency-bound),
  // and their shuffles go out together.
  uint32_t best[Traits::kScaleTiles];
#pragma unroll
  for (int t = 0; t < Traits::kScaleTiles; ++t) {
    best[t] = 0;
#pragma unroll
    for (int i = 0; i < kColumns / 4; ++i) {
      const uint4 scale = *reinterpret_cast<const uint4*>(&s.scale_bits[buffer][t][first_column + 4 * i]);
      best[t] = max(best[t], __float_as_uint(prob[4 * i + 0]) + scale.x);
      best[t] = max(best[t], __float_as_uint(prob[4 * i + 1]) + scale.y);
      best[t] = max(best[t], __float_as_uint(prob[4 * i + 2]) + scale.z);
      best[t] = max(best[t], __float_as_uint(prob[4 * i + 3]) + scale.w);
    }
  }
#pragma unroll
  for (int offset = 8; offset <= 16; offset *= 2) {
#pragma unroll
    for (int t = 0; t < Traits::kScaleTiles; ++t) best[t] = max(best[t], __shfl_xor_sync(0xffffffffu, best[t], offset));
  }
  if (part == 0) {
#pragma unroll
    for (int t = 0; t < Traits::kScaleTiles; ++t) s.best_key[t][head] = best[t];
  }
  __syncwarp();  // every lane has read the old statistics
  if (part == 0) {
    const float rescale = ptx::exp2_approx(old_max - base);  // 0 while old_max is -inf
    s.rescale[head] = rescale;
    s.running_sum[head] = __fmaf_rn(old_sum, rescale, sum);
    s.running_max[head] = new_max;
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
