// S = Q K^T of the packed stream kernel: FP16 wgmma on the E4M3 bytes,
// converted exactly in registers, one accumulator a scale tile.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream/common.cuh"

namespace sparse_decode::dsv4_packed::stream {

// FP32 value of a row's scale: 2^(byte - 127); byte 0 is the subnormal 2^-127.
__device__ __forceinline__ float scale_value(uint32_t bits) { return __uint_as_float(bits != 0 ? bits : 0x00400000u); }

// A score tile's E4M3 bytes (two ldmatrix.x4) as the FP16 A fragments of its
// kSteps k-steps of 16 dims: exact, every E4M3 value is an FP16 one.
template <int kSteps>
__device__ __forceinline__ void tile_to_f16_fragments(const uint32_t (&m)[2][4], uint32_t (&a)[kSteps][4]) {
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    const uint32_t top = m[k / 2][2 * (k % 2)], bottom = m[k / 2][2 * (k % 2) + 1];
    a[k][0] = ptx::e4m3x2_to_f16x2<false>(top);
    a[k][1] = ptx::e4m3x2_to_f16x2<false>(bottom);
    a[k][2] = ptx::e4m3x2_to_f16x2<true>(top);
    a[k][3] = ptx::e4m3x2_to_f16x2<true>(bottom);
  }
}

// Warpgroup g's share of S^T (64 columns x 16 heads, the wgmma N) over
// score tiles 4g .. 4g + 3: score tile j < 7 (scale tile j) from the E4M3
// bytes (two ldmatrix.x4 give its 4 FP16 k-steps after an exact conversion,
// the next tile's issued under this one's wgmmas), on its own accumulator,
// then times the rows' scales into the total; score tile 7, the BF16 dims,
// as they are. Stored as scores[warpgroup][head][column].
__device__ __forceinline__ void score_chunk(Smem& s, int buffer) {
  constexpr int kN = Traits::kHeads;
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  // ldmatrix.x4: matrices (rows 0-7, bytes 0-15), (rows 8-15, 0-15), (0-7, 16-31), (8-15, 16-31).
  const int row = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_base = ptx::smem_address(&s.kv[buffer][row][(lane >> 4) * 16]);
  const uint64_t q =
      ptx::wgmma_descriptor(ptx::smem_address(&s.q[0][0][0][0]), Traits::kCoreBytes, Traits::kQRowGroupBytes);
  const int column = 16 * warp + lane / 4;  // accumulator rows: column, column + 8
  const int first_tile = Traits::kTilesPerWarpgroup * warpgroup;
  uint32_t m[2][4];
  auto load_bytes = [&](int tile) {
    ptx::ldmatrix_x4(m[0], a_base + tile * kPackedTileDims);
    ptx::ldmatrix_x4(m[1], a_base + tile * kPackedTileDims + 32);
  };
  load_bytes(first_tile);
  float total[kN / 2];
#pragma unroll
  for (int j = 0; j < Traits::kTilesPerWarpgroup; ++j) {
    const int tile = first_tile + j;
    float acc[kN / 2];
    uint32_t a[Traits::kStepsPerTile][4];
    // Only warpgroup 1's last tile is the BF16 one (7 scale tiles + 1 in 2 x 4).
    if (tile < Traits::kScaleTiles) {
      tile_to_f16_fragments(m, a);
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < Traits::kStepsPerTile; ++k) {
        const int block = tile * Traits::kStepsPerTile + k;
        ptx::wgmma_f16_64x16x16_rs(acc, a[k], ptx::wgmma_descriptor_advance(q, block * 2 * Traits::kCoreBytes), k > 0);
      }
      ptx::wgmma_commit();
      if (j + 1 < Traits::kTilesPerWarpgroup && tile + 1 < Traits::kScaleTiles) load_bytes(tile + 1);
      const uint32_t bits_top = s.scale_bits[buffer][tile][column];  // loaded while the wgmmas run
      const uint32_t bits_bottom = s.scale_bits[buffer][tile][column + 8];
      ptx::wgmma_wait_all();
      const float f_top = scale_value(bits_top), f_bottom = scale_value(bits_bottom);
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
        ptx::wgmma_bf16_64x16x16_rs(acc, a[k], ptx::wgmma_descriptor_advance(q, block * 2 * Traits::kCoreBytes), k > 0);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait_all();
#pragma unroll
      for (int r = 0; r < kN / 2; ++r) total[r] += acc[r];
    }
  }
  // Fragment: rows column (+8), heads 8j + 2(lane % 4) (+1).
  float(&scores)[Traits::kHeads][Traits::kScoreRowFloats] = s.scores[warpgroup];
  const int head = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    scores[8 * j + head][column] = total[4 * j + 0];
    scores[8 * j + head + 1][column] = total[4 * j + 1];
    scores[8 * j + head][column + 8] = total[4 * j + 2];
    scores[8 * j + head + 1][column + 8] = total[4 * j + 3];
  }
}

}  // namespace sparse_decode::dsv4_packed::stream
