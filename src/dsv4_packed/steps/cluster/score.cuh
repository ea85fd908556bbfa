// S = Q K^T of the packed cluster kernel: BF16 mma.sync, one n8 tile of
// columns a warp.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/cluster/common.cuh"

namespace sparse_decode::dsv4_packed::cluster {

// S = Q K^T for the warp's 8 columns over all 512 dims (32 k16 steps on 4
// accumulators, summed in a fixed order). Fragment: [0], [1] head lane / 4,
// [2], [3] head lane / 4 + 8; columns 8 warp + 2 (lane % 4) + 0, 1.
__device__ __forceinline__ void score_columns(const ClusterSmem& s, float (&d)[4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t q_base = ptx::smem_address(&s.q[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  const uint32_t k_base = ptx::smem_address(&s.kv[warp * Traits::kColumnsPerWarp + (lane & 7)][(lane >> 3) * 8]);
  float acc[4][4] = {};
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 32; ++kk) {
    uint32_t a0[4], a1[4], b[4];
    ptx::ldmatrix_x4(a0, q_base + kk * 64);
    ptx::ldmatrix_x4(a1, q_base + kk * 64 + 32);
    ptx::ldmatrix_x4(b, k_base + kk * 64);
    ptx::mma_bf16_16x8x16(acc[(2 * kk) % 4], a0, b[0], b[1]);
    ptx::mma_bf16_16x8x16(acc[(2 * kk + 1) % 4], a1, b[2], b[3]);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
}

}  // namespace sparse_decode::dsv4_packed::cluster
