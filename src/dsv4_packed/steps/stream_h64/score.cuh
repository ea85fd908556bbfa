// S = Q K^T of the packed stream kernel's 64-head form: warpgroup g scores
// its 32 heads (wgmma N = 32) over all 512 dims. Each score tile's E4M3
// bytes are converted exactly to FP16 (the 16-head step's conversion,
// steps/stream/score.cuh) and its 4 k-steps run on the tile's own
// accumulator, which is scaled into the total (the BF16 dims' tile added
// as it is) while the next tile's wgmmas run.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream/score.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// Warpgroup g's S^T (64 columns x heads 32g .. 32g + 31), stored as
// scores[head][column].
__device__ __forceinline__ void score_chunk(Smem& s, int buffer, int warpgroup) {
  constexpr int kN = Traits::kWarpgroupHeads;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  // ldmatrix.x4: matrices (rows 0-7, bytes 0-15), (rows 8-15, 0-15), (0-7, 16-31), (8-15, 16-31).
  const int row = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_base = ptx::smem_address(&s.kv[buffer][row][(lane >> 4) * 16]);
  const uint64_t q = ptx::wgmma_descriptor(ptx::smem_address(&s.q[kN / 8 * warpgroup][0][0][0]), Traits::kCoreBytes,
                                           Traits::kQRowGroupBytes);
  const int column = 16 * warp + lane / 4;  // accumulator rows: column, column + 8
  // Two tiles in flight: tile t's wgmmas run while tile t - 1's
  // accumulator is scaled into the total and tile t + 1's bytes convert.
  uint32_t a[2][Traits::kStepsPerTile][4];
  float acc[2][kN / 2];
  auto convert = [&](int tile, uint32_t(&fragments)[Traits::kStepsPerTile][4]) {
    if (tile < Traits::kScaleTiles) {
      uint32_t m[2][4];
      ptx::ldmatrix_x4(m[0], a_base + tile * kPackedTileDims);
      ptx::ldmatrix_x4(m[1], a_base + tile * kPackedTileDims + 32);
      stream::tile_to_f16_fragments(m, fragments);
    } else {
#pragma unroll
      for (int k = 0; k < Traits::kStepsPerTile; ++k) {
        ptx::ldmatrix_x4(fragments[k], a_base + Traits::kTailByte + 32 * k);
      }
    }
  };
  float total[kN / 2];
  uint32_t bits[2][2];  // each tile's row scales: column, column + 8
  convert(0, a[0]);
#pragma unroll
  for (int tile = 0; tile < Traits::kScoreTiles; ++tile) {
    const int cur = tile % 2;
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < Traits::kStepsPerTile; ++k) {
      const uint64_t b = ptx::wgmma_descriptor_advance(q, (tile * Traits::kStepsPerTile + k) * 2 * Traits::kCoreBytes);
      if (tile < Traits::kScaleTiles) {
        ptx::wgmma_f16_64x32x16_rs(acc[cur], a[cur][k], b, k > 0);
      } else {
        ptx::wgmma_bf16_64x32x16_rs(acc[cur], a[cur][k], b, k > 0);
      }
    }
    ptx::wgmma_commit();
    if (tile < Traits::kScaleTiles) {
      bits[cur][0] = s.scale_bits[buffer][tile][column];
      bits[cur][1] = s.scale_bits[buffer][tile][column + 8];
    }
    if (tile > 0) {
      ptx::wgmma_wait<1>();  // tile - 1 done: its accumulator and fragments are free
      const float f_top = stream::scale_value(bits[1 - cur][0]), f_bottom = stream::scale_value(bits[1 - cur][1]);
#pragma unroll
      for (int r = 0; r < kN / 2; ++r) {
        const float f = r % 4 < 2 ? f_top : f_bottom;
        total[r] = tile == 1 ? acc[1 - cur][r] * f : __fmaf_rn(acc[1 - cur][r], f, total[r]);
      }
    }
    if (tile + 1 < Traits::kScoreTiles) convert(tile + 1, a[1 - cur]);
  }
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int r = 0; r < kN / 2; ++r) total[r] += acc[(Traits::kScoreTiles - 1) % 2][r];  // the BF16 dims
  // Fragment: rows column (+8), heads 32g + 8j + 2(lane % 4) (+1).
  const int head = kN * warpgroup + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    s.scores[8 * j + head][column] = total[4 * j + 0];
    s.scores[8 * j + head + 1][column] = total[4 * j + 1];
    s.scores[8 * j + head][column + 8] = total[4 * j + 2];
    s.scores[8 * j + head + 1][column + 8] = total[4 * j + 3];
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
