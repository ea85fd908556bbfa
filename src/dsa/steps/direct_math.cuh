// The direct kernel's math on the raw FP8 tile: S = Q K^T and P V by
// mma.sync m16n8k16 FP16, each K and V fragment converted exactly in
// registers (E4M3 -> FP16, one instruction a pair), and the end-of-walk
// reduction of its dim order.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsa/smem.cuh"
#include "dsa/steps/score.cuh"
#include "dsa/steps/softmax.cuh"

namespace sparse_decode::dsa {

// This lane's ldmatrix addresses in tile 0: Q as the A operand (rows =
// heads), K and V of the warp's 16 keys from key0. The 4 matrices of a K or
// V ldmatrix.x4 are keys 0-7 / 8-15 (lane bit 3) x dims 0-15 / 16-31 (bit 4).
__device__ __forceinline__ TileAddresses direct_addresses(DirectSmem& s, int key0, int lane) {
  TileAddresses a;
  a.q = ptx::smem_address(&s.q[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  const int key = key0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  a.k = ptx::smem_address(&s.tiles.slots[0][key][(lane >> 4) * 16]);
  a.v = ptx::smem_address(&s.tiles.slots[0][key][kDsaHeadDim + (lane >> 4) * 16]);
  return a;
}

// Adds Q K^T of this warp's 16 keys to `score` (C fragments: heads g and
// g + 8, keys 8j + 2t and + 1). A non-transposed ldmatrix of FP8 rows gives
// lane (g, t) bytes 4t..4t+3 of key g: converted, the low pair is b0 and the
// high pair b1, so k index 2t + i is dim 4t + i and 2t + 8 + i is dim
// 4t + 2 + i; q's FP16 tile holds its dims in that order (convert_q).
__device__ __forceinline__ void score_direct(float (&score)[2][4], uint32_t q_base, uint32_t k_base) {
#pragma unroll
  for (int x = 0; x < SplitTraits::kScoreSteps / 2; ++x) {  // 32 dims an ldmatrix.x4
    uint32_t b[4];
    ptx::ldmatrix_x4(b, k_base + x * 32);
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // 16-dim step 2x + half: keys 0-7 in b[2 half], 8-15 in b[2 half + 1]
      uint32_t a[4];
      ptx::ldmatrix_x4(a, q_base + (2 * x + half) * 32);
      ptx::mma_f16_16x8x16(score[0], a, ptx::e4m3x2_to_f16x2<false>(b[2 * half]),
                           ptx::e4m3x2_to_f16x2<true>(b[2 * half]));
      ptx::mma_f16_16x8x16(score[1], a, ptx::e4m3x2_to_f16x2<false>(b[2 * half + 1]),
                           ptx::e4m3x2_to_f16x2<true>(b[2 * half + 1]));
    }
  }
}

// Scales the scores to the log2 domain (head g by scale.x, g + 8 by
// scale.y: each head's own power of two folded in); keys without a visible
// slot (`visible(key)`, visible_keys) score -inf. Returns this thread's
// maximum of head g (x) and head g + 8 (y).
template <class Visible>
__device__ __forceinline__ float2 mask_scores_by_head(float (&score)[2][4], int key0, int t, const Visible& visible,
                                                      float2 scale) {
  float top = -INFINITY, bottom = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool valid = visible(key0 + 8 * j + 2 * t + (e % 2));
      score[j][e] = valid ? score[j][e] * (e < 2 ? scale.x : scale.y) : -INFINITY;
      if (e < 2) top = fmaxf(top, score[j][e]);
      else bottom = fmaxf(bottom, score[j][e]);
    }
  return make_float2(top, bottom);
}

// Rescales this warp's P V and adds P V of the tile (FP16 P by FP16 V, 24
// MMAs). ldmatrix.trans on the FP8 rows viewed as byte pairs gives lane
// (g, t) bytes (2t, 2g), (2t, 2g+1), (2t+1, 2g), (2t+1, 2g+1) (key, dim); a
// byte permute splits them into the even-dim and odd-dim B fragments. So
// n-tile 2c + parity, column n, is dim 16c + 2n + parity: a lane ends with
// dims 16c + 4t .. 16c + 4t + 3 of its heads.
__device__ __forceinline__ void pv_direct(float (&o)[SplitTraits::kDimTiles][4], const float (&rescale)[2],
                                          const uint32_t (&p)[4], uint32_t v_base) {
  using T = SplitTraits;
#pragma unroll
  for (int d = 0; d < T::kDimTiles; ++d) {
    o[d][0] *= rescale[0], o[d][1] *= rescale[0];
    o[d][2] *= rescale[1], o[d][3] *= rescale[1];
  }
#pragma unroll
  for (int x = 0; x < T::kDimTiles / 4; ++x) {  // 32 dims an ldmatrix.x4.trans
    uint32_t r[4];
    ptx::ldmatrix_x4_trans(r, v_base + x * 32);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = 2 * x + half;
      // (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
      const uint32_t keys_lo = __byte_perm(r[2 * half], 0, 0x3120);
      const uint32_t keys_hi = __byte_perm(r[2 * half + 1], 0, 0x3120);
      ptx::mma_f16_16x8x16(o[2 * c], p, ptx::e4m3x2_to_f16x2<false>(keys_lo), ptx::e4m3x2_to_f16x2<false>(keys_hi));
      ptx::mma_f16_16x8x16(o[2 * c + 1], p, ptx::e4m3x2_to_f16x2<true>(keys_lo),
                           ptx::e4m3x2_to_f16x2<true>(keys_hi));
    }
  }
}

// As reduce_warps, for pv_direct's dim order: the sums of each thread's 4
// shares, then each warp's sums and P V (dims 16c + 4t .. + 3 of heads g and
// g + 8 a lane) and warp 0's maxima into the reduce buffer, which replaces
// the tiles.
__device__ __forceinline__ void reduce_warps_direct(DirectSmem& s, HeadPair& state,
                                                    const float (&o)[SplitTraits::kDimTiles][4], int warp, int g,
                                                    int t) {
  using T = SplitTraits;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) state.sum[b] += __shfl_xor_sync(0xffffffffu, state.sum[b], offset);
  }
  __syncthreads();  // the last tile's readers are done: tiles become the reduce buffer
  if (t == 0) s.warp_sum[warp][g] = state.sum[0], s.warp_sum[warp][g + 8] = state.sum[1];
  if (warp == 0 && t == 0) s.head_max[g] = state.max[0], s.head_max[g + 8] = state.max[1];
#pragma unroll
  for (int c = 0; c < T::kDimTiles / 2; ++c) {
    const int dim = 16 * c + 4 * t;
    *reinterpret_cast<float4*>(&s.tiles.reduce[warp][g][dim]) =
        make_float4(o[2 * c][0], o[2 * c + 1][0], o[2 * c][1], o[2 * c + 1][1]);
    *reinterpret_cast<float4*>(&s.tiles.reduce[warp][g + 8][dim]) =
        make_float4(o[2 * c][2], o[2 * c + 1][2], o[2 * c][3], o[2 * c + 1][3]);
  }
  __syncthreads();
}

}  // namespace sparse_decode::dsa
