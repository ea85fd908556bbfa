// S = Q K^T of the packed stream kernel's 64-head form, by warpgroup 0:
// the 64 heads (M) against the chunk's 64 rows (N), BF16 from shared
// memory, then each column times its row's 2^(key byte - 127): the scores
// of exact products summed in FP32.
#pragma once

#include <cstdint>

#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream/score.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// A warpgroup-0 thread's scores (times 2^q_shift) of rows fragment_row(0, 1)
// and the columns of fragment_column(j); key[j] their rows' key bits.
struct ChunkScores {
  float s[32];
  uint2 key[8];
};

__device__ __forceinline__ void score_chunk(const Smem& s, ChunkScores& c) {
  constexpr int kStepBytes = 2 * Traits::kCoreBytes;  // 16 dims
  const uint64_t q = q_descriptor(s), k = key_descriptor(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < Traits::kPieces / 2; ++step) {
    ptx::wgmma_bf16_64x64x16_ss(c.s, ptx::wgmma_descriptor_advance(q, step * kStepBytes),
                                ptx::wgmma_descriptor_advance(k, step * kStepBytes), step > 0);
  }
  ptx::wgmma_commit();
#pragma unroll
  for (int j = 0; j < 8; ++j) c.key[j] = *reinterpret_cast<const uint2*>(&s.key_bits[fragment_column(j)]);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_operand(c.s);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float left = stream::scale_value(c.key[j].x), right = stream::scale_value(c.key[j].y);
    c.s[4 * j] *= left, c.s[4 * j + 1] *= right, c.s[4 * j + 2] *= left, c.s[4 * j + 3] *= right;
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
