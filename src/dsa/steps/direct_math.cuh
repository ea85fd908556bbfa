// The direct kernel's math on the raw FP8 tile: S = Q K^T and P V by
// mma.sync m16n8k16 FP16, each K and V fragment converted exactly in
// registers (E4M3 -> FP16, one instruction a pair). Warp w scores keys
// 16w..16w + 15 and multiplies the tile's P, all 64 keys, by V's dims
// 48w..48w + 47: P goes through shared memory, and a warp's P V is 24
// registers instead of 96.
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

// The dims of V a warp multiplies: three 16-byte units of the slot.
inline constexpr int kWarpDims = TileTraits::kDims / TileTraits::kWarps;  // 48
inline constexpr int kWarpDimTiles = kWarpDims / 8;                         // 6 n8 tiles of P V
static_assert(kWarpDims == 48, "a warp's V is one ldmatrix.x4 and one .x2 (16 bytes each matrix row) a k16 step");

// This lane's ldmatrix addresses in tile buffer 0: K of the warp's 16 keys
// from key0 (the 4 matrices of an x4: keys 0-7 / 8-15 by lane bit 3, dims
// 0-15 / 16-31 by bit 4), P as the A operand of k16 step 0 (rows = heads),
// and V of keys 0..15, the warp's dims (16-byte units by lane bit 4).
struct DirectAddresses {
  uint32_t k;
  uint32_t v;
  uint32_t p;
};

__device__ __forceinline__ DirectAddresses direct_addresses(DirectSmem& s, int warp, int lane) {
  const int row = (lane & 7) + ((lane >> 3) & 1) * 8;  // key (K, V) or head (P) of the lane's address
  DirectAddresses a;
  a.k = ptx::smem_address(&s.tiles.slots[0][warp * TileTraits::kKeysPerWarp + row][(lane >> 4) * 16]);
  a.v = ptx::smem_address(&s.tiles.slots[0][row][kDsaHeadDim + warp * kWarpDims + (lane >> 4) * 16]);
  a.p = ptx::smem_address(&s.probabilities[row][(lane >> 4) * 8]);
  return a;
}

// q (its FP16 staging, landed and visible) as the A fragments of the 12
// k16 steps of Q K^T, held in registers through the walk.
__device__ __forceinline__ QFragments load_q_fragments(DirectSmem& s, int lane) {
  return load_q_fragments_at(
      ptx::smem_address(&s.tiles.q.f16[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]));
}

// Adds Q K^T of this warp's 16 keys to `score` (C fragments: heads g and
// g + 8, keys 8j + 2t and + 1). A non-transposed ldmatrix of FP8 rows gives
// lane (g, t) bytes 4t..4t+3 of key g: converted, the low pair is b0 and the
// high pair b1, so k index 2t + i is dim 4t + i and 2t + 8 + i is dim
// 4t + 2 + i; q's FP16 tile holds its dims in that order (convert_q).
__device__ __forceinline__ void score_direct(float (&score)[2][4], const QFragments& q, uint32_t k_base) {
#pragma unroll
  for (int x = 0; x < TileTraits::kScoreSteps / 2; ++x) {  // 32 dims an ldmatrix.x4
    uint32_t b[4];
    ptx::ldmatrix_x4(b, k_base + x * 32);
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // 16-dim step 2x + half: keys 0-7 in b[2 half], 8-15 in b[2 half + 1]
      const uint32_t(&a)[4] = q.a[2 * x + half];
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

// Writes this warp's P (the A fragment of its 16 keys from key0: heads g
// and g + 8, keys 2t, 2t + 1 and 8 + 2t, 9 + 2t) into the tile's P; the
// caller's barrier makes it visible.
__device__ __forceinline__ void publish_probabilities(DirectSmem& s, const uint32_t (&p)[4], int key0, int g, int t) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    *reinterpret_cast<uint32_t*>(&s.probabilities[g + 8 * (r % 2)][key0 + 8 * (r / 2) + 2 * t]) = p[r];
  }
}

// Rescales this warp's P V and adds P V of the tile for its 48 dims: four
// k16 steps of 16 keys, 6 MMAs each (FP16 P by FP16 V). ldmatrix.trans on
// the FP8 rows viewed as byte pairs gives lane (g, t) bytes (2t, 2g),
// (2t, 2g+1), (2t+1, 2g), (2t+1, 2g+1) (key, dim); a byte permute splits
// them into the even-dim and odd-dim B fragments. So n-tile 2c + parity,
// column n, is dim 48w + 16c + 2n + parity: a lane ends with dims
// 48w + 16c + 4t .. + 3 of its heads.
__device__ __forceinline__ void pv_by_dims(float (&o)[kWarpDimTiles][4], const float (&rescale)[2],
                                           const DirectAddresses& at, uint32_t v_base) {
  using T = TileTraits;
#pragma unroll
  for (int d = 0; d < kWarpDimTiles; ++d) {
    o[d][0] *= rescale[0], o[d][1] *= rescale[0];
    o[d][2] *= rescale[1], o[d][3] *= rescale[1];
  }
#pragma unroll
  for (int kk = 0; kk < T::kKeys / 16; ++kk) {
    uint32_t p[4], r[4], r2[2];
    ptx::ldmatrix_x4(p, at.p + kk * 32);
    const uint32_t v = v_base + kk * 16 * DirectSmem::kSlotBytes;
    ptx::ldmatrix_x4_trans(r, v);
    ptx::ldmatrix_x2_trans(r2, v + 32);  // lanes 0..15: their keys' third unit
    const uint32_t lo[3] = {r[0], r[2], r2[0]}, hi[3] = {r[1], r[3], r2[1]};  // keys 0-7, 8-15 of unit c
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      // (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
      const uint32_t keys_lo = __byte_perm(lo[c], 0, 0x3120);
      const uint32_t keys_hi = __byte_perm(hi[c], 0, 0x3120);
      ptx::mma_f16_16x8x16(o[2 * c], p, ptx::e4m3x2_to_f16x2<false>(keys_lo), ptx::e4m3x2_to_f16x2<false>(keys_hi));
      ptx::mma_f16_16x8x16(o[2 * c + 1], p, ptx::e4m3x2_to_f16x2<true>(keys_lo),
                           ptx::e4m3x2_to_f16x2<true>(keys_hi));
    }
  }
}

// The end of the walk: the sums of each thread's 4 shares, then each warp's
// sums, warp 0's maxima and each warp's dims of P V (48w + 16c + 4t .. + 3
// of heads g and g + 8 a lane) into the reduce buffer, which replaces the
// tiles.
__device__ __forceinline__ void reduce_by_dims(DirectSmem& s, HeadPair& state, const float (&o)[kWarpDimTiles][4],
                                               int warp, int g, int t) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) state.sum[b] += __shfl_xor_sync(0xffffffffu, state.sum[b], offset);
  }
  __syncthreads();  // the last tile's readers are done: tiles become the reduce buffer
  if (t == 0) s.warp_sum[warp][g] = state.sum[0], s.warp_sum[warp][g + 8] = state.sum[1];
  if (warp == 0 && t == 0) s.head_max[g] = state.max[0], s.head_max[g + 8] = state.max[1];
#pragma unroll
  for (int c = 0; c < kWarpDimTiles / 2; ++c) {
    const int dim = warp * kWarpDims + 16 * c + 4 * t;
    *reinterpret_cast<float4*>(&s.tiles.reduce[0][g][dim]) =
        make_float4(o[2 * c][0], o[2 * c + 1][0], o[2 * c][1], o[2 * c + 1][1]);
    *reinterpret_cast<float4*>(&s.tiles.reduce[0][g + 8][dim]) =
        make_float4(o[2 * c][2], o[2 * c + 1][2], o[2 * c][3], o[2 * c + 1][3]);
  }
  __syncthreads();
}

}  // namespace sparse_decode::dsa
