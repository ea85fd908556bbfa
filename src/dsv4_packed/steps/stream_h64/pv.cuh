// O = P V of the packed stream kernel's 64-head form: the weights (P times
// each row's 2^(key byte - 127 - e)) as BF16 hi + lo from registers, V the
// key tile read N-major, 256 dims a warpgroup: warpgroup 0 dims 0..255
// from its own softmax registers, warpgroup 1 dims 256..511 from P in
// shared memory.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/stream_h64/softmax.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

inline constexpr int kKSteps = Traits::kChunkColumns / 16;
inline constexpr uint32_t kKStepBytes = 2 * Traits::kRowGroupBytes;  // 16 rows of the key tile

// A warpgroup's O: its 256 dims of the thread's two heads (m64n256).
using HalfDims = float[Traits::kHalfDims / 2];

// A-operand fragments of the weights, BF16 hi and lo (hi + lo: 16 bits of each).
struct Weights {
  uint32_t hi[kKSteps][4];
  uint32_t lo[kKSteps][4];
  // Fragment register i (h + 2 part) of k-step `step`: the weights of columns c, c + 1.
  __device__ __forceinline__ void set(int step, int i, float x, float y) {
    hi[step][i] = ptx::bf16x2_bits(x, y);
    const float x_hi = __uint_as_float(hi[step][i] << 16), y_hi = __uint_as_float(hi[step][i] & 0xffff0000u);
    lo[step][i] = ptx::bf16x2_bits(x - x_hi, y - y_hi);
  }
};

// O times the rows' factors, then the chunk's wgmmas for dims first_dim ..
// first_dim + 255 (lo first, the smaller terms); the caller waits.
__device__ __forceinline__ void accumulate(const Smem& s, const Weights& w, const float (&factor)[2], int first_dim,
                                          HalfDims& o) {
  ptx::wgmma_fence_operand(o);
  if (factor[0] != 1.0f || factor[1] != 1.0f) {  // most chunks after the first keep the max and the exponent
#pragma unroll
    for (int i = 0; i < Traits::kHalfDims / 2; i += 4) {
      o[i] *= factor[0], o[i + 1] *= factor[0], o[i + 2] *= factor[1], o[i + 3] *= factor[1];
    }
  }
  ptx::wgmma_fence_operand(o);
  ptx::wgmma_fence();
  const uint64_t v = value_descriptor(s, first_dim);
#pragma unroll
  for (int step = 0; step < kKSteps; ++step) {
    ptx::wgmma_bf16_64x256x16_rs_nmajor(o, w.lo[step], ptx::wgmma_descriptor_advance(v, step * kKStepBytes), true);
  }
#pragma unroll
  for (int step = 0; step < kKSteps; ++step) {
    ptx::wgmma_bf16_64x256x16_rs_nmajor(o, w.hi[step], ptx::wgmma_descriptor_advance(v, step * kKStepBytes), true);
  }
  ptx::wgmma_commit();
}

// Warpgroup 0: the weights from its softmax registers.
__device__ __forceinline__ void accumulate_low(const Smem& s, const ChunkScores& c, const RowStep (&steps)[2],
                                               HalfDims& o) {
  Weights w;
#pragma unroll
  for (int step = 0; step < kKSteps; ++step)
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const int j = 2 * step + part;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w.set(step, h + 2 * part, weight(c.s[4 * j + 2 * h], c.key[j].x, steps[h].floor),
              weight(c.s[4 * j + 2 * h + 1], c.key[j].y, steps[h].floor));
      }
    }
  const float factor[2] = {steps[0].o_factor, steps[1].o_factor};
  accumulate(s, w, factor, 0, o);
}

// Warpgroup 1: the weights from P, the rescale factors and the exponents
// warpgroup 0 left in shared memory; `exponent` its copy of the heads'.
__device__ __forceinline__ void accumulate_high(const Smem& s, int (&exponent)[2], HalfDims& o) {
  float factor[2];
  uint32_t floor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = fragment_row(h);
    const int next = s.exponent[head];
    factor[h] = s.rescale[head] * pow2(exponent[h] - next);
    floor[h] = static_cast<uint32_t>(next + 127) << 23;
    exponent[h] = next;
  }
  Weights w;
#pragma unroll
  for (int step = 0; step < kKSteps; ++step)
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const int column = 16 * step + 8 * part + 2 * (threadIdx.x % 4);
      const uint2 key = *reinterpret_cast<const uint2*>(&s.key_bits[column]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 prob = *reinterpret_cast<const float2*>(&s.probs[fragment_row(h)][column]);
        w.set(step, h + 2 * part, weight(prob.x, key.x, floor[h]), weight(prob.y, key.y, floor[h]));
      }
    }
  accumulate(s, w, factor, Traits::kHalfDims, o);
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
