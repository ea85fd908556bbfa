// The split kernel's P V: P from the score fragment (the C layout of two n8
// tiles is the A layout of one k16 step), V by ldmatrix.trans.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

// Rescales this warp's P V (`o`: heads g (0, 1) and g + 8 (2, 3), dims
// 8d + 2t and + 1) and adds P V of the tile: FP16 P by FP16 V with FP8
// caches (24 MMAs), BF16 lo then hi by BF16 V with BF16 caches (48).
template <bool kFp8>
__device__ __forceinline__ void pv_tile(float (&o)[SplitTraits::kDimTiles][4], const float (&rescale)[2],
                                        const uint32_t (&hi)[4], const uint32_t (&lo)[4], uint32_t v_base) {
  using T = SplitTraits;
#pragma unroll
  for (int d = 0; d < T::kDimTiles; ++d) {
    o[d][0] *= rescale[0], o[d][1] *= rescale[0];
    o[d][2] *= rescale[1], o[d][3] *= rescale[1];
  }
#pragma unroll
  for (int d = 0; d < T::kDimTiles / 2; ++d) {
    uint32_t r[4];
    ptx::ldmatrix_x4_trans(r, v_base + d * 32);
    if constexpr (kFp8) {
      ptx::mma_f16_16x8x16(o[2 * d], hi, r[0], r[1]);
      ptx::mma_f16_16x8x16(o[2 * d + 1], hi, r[2], r[3]);
    } else {
      ptx::mma_bf16_16x8x16(o[2 * d], lo, r[0], r[1]);
      ptx::mma_bf16_16x8x16(o[2 * d + 1], lo, r[2], r[3]);
      ptx::mma_bf16_16x8x16(o[2 * d], hi, r[0], r[1]);
      ptx::mma_bf16_16x8x16(o[2 * d + 1], hi, r[2], r[3]);
    }
  }
}

}  // namespace sparse_decode::dsa
