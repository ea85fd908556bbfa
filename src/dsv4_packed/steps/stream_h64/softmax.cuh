// The online softmax of the packed stream kernel's 64-head form, by
// warpgroup 0 on its score registers (4 threads a head, 16 columns each),
// and the scale exponent of each head's O for the chunk: P V multiplies
// weights P 2^(key byte - 127 - e) (BF16 hi + lo) into O = acc 2^e, e chosen from the
// head's largest P 2^(key byte - 127) so that the weights stay below 2 and
// the largest keeps its bits (the 16-head rule, a head instead of a
// (head, scale tile)).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "dsv4_packed/steps/stream/softmax.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/stream_h64/score.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// A head's running statistics and O's scale exponent, in the registers of
// its 4 threads.
struct RowState {
  float max = -INFINITY;  // log2 domain
  float sum = 0.0f;
  int exponent = kNoExponent;
};

// O's factor and the weights' floor (new exponent + 127) << 23 of a head for this chunk.
struct RowStep {
  float o_factor;  // exp2(old max - new max) * 2^(old exponent - new exponent)
  uint32_t floor;
};

// The weight of P (FP32) of a row with key bits `key` under `floor`: P 2^(key byte - 127 - e).
__device__ __forceinline__ float weight(float prob, uint32_t key, uint32_t floor) {
  return __int_as_float(max(static_cast<int>(__float_as_uint(prob) + key - floor), 0));
}

// op over 8 values as a tree of depth 3 (a fixed order: the same bits every run).
template <class T, class Op>
__device__ __forceinline__ T tree8(const T (&v)[8], Op op) {
  return op(op(op(v[0], v[1]), op(v[2], v[3])), op(op(v[4], v[5]), op(v[6], v[7])));
}

// The new exponent of a head from its old one, the rescale factor and the
// chunk's largest key bits(P) + key bits (0 without an active column).
__device__ __forceinline__ RowStep step_exponent(RowState& row, float rescale, uint32_t best) {
  const int chunk_exponent = static_cast<int>(best >> 23) - 254;
  const int rescale_log2 = static_cast<int>(__float_as_uint(rescale) >> 23) - 127;
  // At least -127, so that a masked column's key 0 is below the floor.
  const int exponent = max(max(row.exponent + rescale_log2, chunk_exponent), -127);
  RowStep step{rescale * pow2(row.exponent - exponent), static_cast<uint32_t>(exponent + 127) << 23};
  row.exponent = exponent;
  return step;
}

// The chunk's softmax on the scores (replaced by P, FP32; 0 for masked
// columns); P, the rescale factor and the exponent of each head go to
// shared memory for warpgroup 1.
__device__ __forceinline__ void softmax_chunk(Smem& s, ChunkScores& c, float scale_log2, RowState (&rows)[2],
                                              RowStep (&steps)[2]) {
  // Both heads at once and every reduction as a tree: the chains are short
  // and independent (one warp a scheduler runs this, nothing hides latency).
  const uint64_t mask = s.key_mask;
  bool active[8][2];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int n = 0; n < 2; ++n) active[j][n] = (mask >> (fragment_column(j) + n)) & 1u;
  float part[2][8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float& x = c.s[4 * j + 2 * h];
      float& y = c.s[4 * j + 2 * h + 1];
      x = active[j][0] ? x * scale_log2 : -INFINITY;
      y = active[j][1] ? y * scale_log2 : -INFINITY;
      part[h][j] = fmaxf(x, y);
    }
  const auto larger = [](float a, float b) { return fmaxf(a, b); };
  const auto plus = [](float a, float b) { return a + b; };
  const auto larger_bits = [](uint32_t a, uint32_t b) { return max(a, b); };
  float base[2], new_max[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) new_max[h] = tree8(part[h], larger);
#pragma unroll
  for (int offset = 1; offset <= 2; offset *= 2)
#pragma unroll
    for (int h = 0; h < 2; ++h) new_max[h] = fmaxf(new_max[h], __shfl_xor_sync(0xffffffffu, new_max[h], offset));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    new_max[h] = fmaxf(rows[h].max, new_max[h]);
    base[h] = new_max[h] == -INFINITY ? 0.0f : new_max[h];  // no active column yet: all p = 0
  }
  float sum[2][8];
  uint32_t best[2][8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float& x = c.s[4 * j + 2 * h];
      float& y = c.s[4 * j + 2 * h + 1];
      // An active column's P is at least 2^-126, so that its weight keeps P's
      // scale (a P of 0 would be read as 2^(key byte - 254) by weight()).
      x = active[j][0] ? fmaxf(ptx::exp2_approx(x - base[h]), stream::kMinProbability) : 0.0f;
      y = active[j][1] ? fmaxf(ptx::exp2_approx(y - base[h]), stream::kMinProbability) : 0.0f;
      sum[h][j] = x + y;
      best[h][j] = max(__float_as_uint(x) + c.key[j].x, __float_as_uint(y) + c.key[j].y);
    }
  float total[2];
  uint32_t top[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) total[h] = tree8(sum[h], plus), top[h] = tree8(best[h], larger_bits);
#pragma unroll
  for (int offset = 1; offset <= 2; offset *= 2)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      total[h] += __shfl_xor_sync(0xffffffffu, total[h], offset);
      top[h] = max(top[h], __shfl_xor_sync(0xffffffffu, top[h], offset));
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = fragment_row(h);
    const float rescale = ptx::exp2_approx(rows[h].max - base[h]);  // 0 while the old max is -inf
    rows[h].sum = __fmaf_rn(rows[h].sum, rescale, total[h]);
    rows[h].max = new_max[h];
    steps[h] = step_exponent(rows[h], rescale, top[h]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      *reinterpret_cast<float2*>(&s.probs[head][fragment_column(j)]) =
          make_float2(c.s[4 * j + 2 * h], c.s[4 * j + 2 * h + 1]);
    }
    if (threadIdx.x % 4 == 0) {
      s.rescale[head] = rescale;
      s.exponent[head] = rows[h].exponent;
    }
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
