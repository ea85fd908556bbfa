// O = P V of the packed cluster kernel: BF16 mma.sync, P as hi + lo.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/cluster/common.cuh"

namespace sparse_decode::dsv4_packed::cluster {

// O = O * factor + P V for the warp's 64 dims: V's B fragments by
// ldmatrix.trans from the [column][dim] tile. acc[j] is the n8 tile of dims
// 64 warp + 8 j: [0], [1] head lane / 4, [2], [3] head lane / 4 + 8, dims
// 2 (lane % 4) + 0, 1.
__device__ __forceinline__ void accumulate_chunk(const ClusterSmem& s, float (&acc)[8][4], float2 factor) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc[j][0] *= factor.x, acc[j][1] *= factor.x, acc[j][2] *= factor.y, acc[j][3] *= factor.y;
  }
  const int fragment_row = (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t hi_base = ptx::smem_address(&s.probs.hi[fragment_row][(lane >> 4) * 8]);
  const uint32_t lo_base = ptx::smem_address(&s.probs.lo[fragment_row][(lane >> 4) * 8]);
  const uint32_t v_base = ptx::smem_address(&s.kv[fragment_row][warp * Traits::kDimsPerWarp + (lane >> 4) * 8]);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t hi[4], lo[4];
    ptx::ldmatrix_x4(hi, hi_base + kk * 32);
    ptx::ldmatrix_x4(lo, lo_base + kk * 32);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_base + kk * 16 * Traits::kTileStride * 2 + j * 32);
      ptx::mma_bf16_16x8x16(acc[2 * j], lo, b[0], b[1]);
      ptx::mma_bf16_16x8x16(acc[2 * j + 1], lo, b[2], b[3]);
      ptx::mma_bf16_16x8x16(acc[2 * j], hi, b[0], b[1]);
      ptx::mma_bf16_16x8x16(acc[2 * j + 1], hi, b[2], b[3]);
    }
  }
}

}  // namespace sparse_decode::dsv4_packed::cluster
