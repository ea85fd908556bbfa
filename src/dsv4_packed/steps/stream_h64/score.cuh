// S = Q K^T of the packed stream kernel's 64-head form: the 16-head step
// (steps/stream/score.cuh) with the heads as wgmma N in two passes of 32,
// each pass converting the E4M3 bytes again (16 conversions a tile a lane)
// so that only 32 score registers, not 64, are live beside the P V
// accumulator.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream/score.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// Warpgroup g's share of S^T (64 columns x 64 heads) over score tiles 4g ..
// 4g + 3 (tile 7: the BF16 dims), stored as scores[warpgroup][head][column].
__device__ __forceinline__ void score_chunk(Smem& s, int buffer) {
  constexpr int kN = Traits::kScoreHeads;
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  // ldmatrix.x4: matrices (rows 0-7, bytes 0-15), (rows 8-15, 0-15), (0-7, 16-31), (8-15, 16-31).
  const int row = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_base = ptx::smem_address(&s.kv[buffer][row][(lane >> 4) * 16]);
  const int column = 16 * warp + lane / 4;  // accumulator rows: column, column + 8
  const int first_tile = Traits::kTilesPerWarpgroup * warpgroup;
  float(&scores)[Traits::kHeads][Traits::kScoreRowFloats] = s.scores[warpgroup];
#pragma unroll 1
  for (int pass = 0; pass < Traits::kScorePasses; ++pass) {
    const uint64_t q = ptx::wgmma_descriptor(ptx::smem_address(&s.q[pass * kN / 8][0][0][0]), Traits::kCoreBytes,
                                             Traits::kQRowGroupBytes);
    float total[kN / 2];
#pragma unroll
    for (int j = 0; j < Traits::kTilesPerWarpgroup; ++j) {
      const int tile = first_tile + j;
      float acc[kN / 2];
      uint32_t a[Traits::kStepsPerTile][4];
      if (tile < Traits::kScaleTiles) {
        uint32_t m[2][4];
        ptx::ldmatrix_x4(m[0], a_base + tile * kPackedTileDims);
        ptx::ldmatrix_x4(m[1], a_base + tile * kPackedTileDims + 32);
#pragma unroll
        for (int k = 0; k < Traits::kStepsPerTile; ++k) {
          const uint32_t top = m[k / 2][2 * (k % 2)], bottom = m[k / 2][2 * (k % 2) + 1];
          a[k][0] = ptx::e4m3x2_to_f16x2<false>(top);
          a[k][1] = ptx::e4m3x2_to_f16x2<false>(bottom);
          a[k][2] = ptx::e4m3x2_to_f16x2<true>(top);
          a[k][3] = ptx::e4m3x2_to_f16x2<true>(bottom);
        }
        ptx::wgmma_fence();
#pragma unroll
        for (int k = 0; k < Traits::kStepsPerTile; ++k) {
          const int block = tile * Traits::kStepsPerTile + k;
          ptx::wgmma_f16_64x32x16_rs(acc, a[k], ptx::wgmma_descriptor_advance(q, block * 2 * Traits::kCoreBytes),
                                     k > 0);
        }
        ptx::wgmma_commit();
        const uint32_t bits_top = s.scale_bits[buffer][tile][column];  // loaded while the wgmmas run
        const uint32_t bits_bottom = s.scale_bits[buffer][tile][column + 8];
        ptx::wgmma_wait_all();
        const float f_top = stream::scale_value(bits_top), f_bottom = stream::scale_value(bits_bottom);
#pragma unroll
        for (int r = 0; r < kN / 2; ++r) {
          const float f = r % 4 < 2 ? f_top : f_bottom;
          total[r] = j == 0 ? acc[r] * f : __fmaf_rn(acc[r], f, total[r]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < Traits::kStepsPerTile; ++k) ptx::ldmatrix_x4(a[k], a_base + Traits::kTailByte + 32 * k);
        ptx::wgmma_fence();
#pragma unroll
        for (int k = 0; k < Traits::kStepsPerTile; ++k) {
          const int block = Traits::kFp8Blocks + k;
          ptx::wgmma_bf16_64x32x16_rs(acc, a[k], ptx::wgmma_descriptor_advance(q, block * 2 * Traits::kCoreBytes),
                                      k > 0);
        }
        ptx::wgmma_commit();
        ptx::wgmma_wait_all();
#pragma unroll
        for (int r = 0; r < kN / 2; ++r) total[r] += acc[r];
      }
    }
    // Fragment: rows column (+8), heads kN pass + 8j + 2(lane % 4) (+1).
    const int head = pass * kN + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      scores[8 * j + head][column] = total[4 * j + 0];
      scores[8 * j + head + 1][column] = total[4 * j + 1];
      scores[8 * j + head][column + 8] = total[4 * j + 2];
      scores[8 * j + head + 1][column + 8] = total[4 * j + 3];
    }
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
