// The split kernel's P V: each warp writes its P fragment into the tile's
// P, then multiplies all 64 keys of it by its 24 dims of V (ldmatrix.trans).
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsa/smem.cuh"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

// Writes this warp's P (heads g (0) and g + 8 (1), keys key0 + 2t and + 1)
// into the tile's P: BF16 hi and lo, or FP16 (hi) with FP8 caches. The
// caller's barrier makes it visible.
template <bool kFp8>
__device__ __forceinline__ void publish_probabilities(SplitSmem<kFp8>& s, const uint32_t (&hi)[2],
                                                      const uint32_t (&lo)[2], int key0, int g, int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    *reinterpret_cast<uint32_t*>(&s.probabilities[0][g + 8 * half][key0 + 2 * t]) = hi[half];
    if constexpr (!kFp8) *reinterpret_cast<uint32_t*>(&s.probabilities[1][g + 8 * half][key0 + 2 * t]) = lo[half];
  }
}

// Rescales this warp's P V (`o`: heads g (0, 1) and g + 8 (2, 3), dims
// 24w + 8n + 2t and + 1) and adds P V of the tile's 64 keys for its dims:
// four k16 steps of 3 n8 tiles, FP16 P by FP16 V with FP8 caches (12
// MMAs), BF16 lo then hi by BF16 V with BF16 caches (24).
template <bool kFp8>
__device__ __forceinline__ void pv_tile(float (&o)[SplitKernelTraits::kWarpDimTiles][4], const float (&rescale)[2],
                                        uint32_t p_base, uint32_t v_base) {
  using T = TileTraits;
  constexpr uint32_t kPlaneBytes = sizeof(SplitSmem<kFp8>::probabilities[0]);
#pragma unroll
  for (int n = 0; n < SplitKernelTraits::kWarpDimTiles; ++n) {
    o[n][0] *= rescale[0], o[n][1] *= rescale[0];
    o[n][2] *= rescale[1], o[n][3] *= rescale[1];
  }
#pragma unroll
  for (int kk = 0; kk < T::kKeys / 16; ++kk) {
    uint32_t hi[4], r[4], r2[2];
    ptx::ldmatrix_x4(hi, p_base + kk * 32);
    const uint32_t v = v_base + kk * 16 * T::kRowHalves * 2;
    ptx::ldmatrix_x4_trans(r, v);
    ptx::ldmatrix_x2_trans(r2, v + 32);  // lanes 0..15: dims + 16
    const uint32_t b0[3] = {r[0], r[2], r2[0]}, b1[3] = {r[1], r[3], r2[1]};  // keys 0-7, 8-15 of n-tile n
    if constexpr (kFp8) {
#pragma unroll
      for (int n = 0; n < 3; ++n) ptx::mma_f16_16x8x16(o[n], hi, b0[n], b1[n]);
    } else {
      uint32_t lo[4];
      ptx::ldmatrix_x4(lo, p_base + kPlaneBytes + kk * 32);
#pragma unroll
      for (int n = 0; n < 3; ++n) {
        ptx::mma_bf16_16x8x16(o[n], lo, b0[n], b1[n]);
        ptx::mma_bf16_16x8x16(o[n], hi, b0[n], b1[n]);
      }
    }
  }
}

}  // namespace sparse_decode::dsa
