// The split kernel's scores: S = Q K^T of a warp's 8 keys by mma.sync
// m16n8k16 BF16 (the row's heads are M = 16, padded; q's A fragments held
// in registers), scaled to the log2 domain and masked where a key holds no
// visible slot.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsa/smem.cuh"
#include "dsa/steps/load.cuh"

namespace sparse_decode::dsa {

// q as the A fragments of the 12 k16 steps of Q K^T (rows = heads), held in
// registers through the walk.
struct QFragments {
  uint32_t a[TileTraits::kScoreSteps][4];
};

// Loads the A fragments from a q tile of kRowHalves-half rows at `base`
// (this lane's address of step 0: row (lane & 7) + 8 (lane bit 3), dims
// 8 (lane bit 4)).
__device__ __forceinline__ QFragments load_q_fragments_at(uint32_t base) {
  QFragments q;
#pragma unroll
  for (int kk = 0; kk < TileTraits::kScoreSteps; ++kk) ptx::ldmatrix_x4(q.a[kk], base + kk * 32);
  return q;
}

template <bool kFp8>
__device__ __forceinline__ QFragments load_q_fragments(SplitSmem<kFp8>& s, int lane) {
  return load_q_fragments_at(ptx::smem_address(&q_staging(s)[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]));
}

// This lane's ldmatrix addresses in KV tile buffer 0: K of the warp's 8
// keys from key0 (an x4 holds dims 0-7 / 8-15 / 16-23 / 24-31 by lane bits
// 3-4: two k16 steps), V of keys 0..15 at the warp's dims (trans; keys 8-15
// by lane bit 3, dims + 8 by bit 4), and P as the A operand of k16 step 0.
struct TileAddresses {
  uint32_t k;
  uint32_t v;
  uint32_t p;
};

template <bool kFp8>
__device__ __forceinline__ TileAddresses tile_addresses(SplitSmem<kFp8>& s, int warp, int lane) {
  using W = SplitKernelTraits;
  const int row = (lane & 7) + ((lane >> 3) & 1) * 8;  // key (V) or head (P) of the lane's address
  TileAddresses a;
  a.k = ptx::smem_address(&s.tiles.kv[0].k[warp * W::kKeysPerWarp + (lane & 7)][(lane >> 3) * 8]);
  a.v = ptx::smem_address(&s.tiles.kv[0].v[row][warp * W::kWarpDims + (lane >> 4) * 8]);
  a.p = ptx::smem_address(&s.probabilities[0][row][(lane >> 4) * 8]);
  return a;
}

// Adds Q K^T of this warp's 8 keys to `score` (C fragment: heads g and
// g + 8, keys 2t and 2t + 1).
__device__ __forceinline__ void score_tile(float (&score)[1][4], const QFragments& q, uint32_t k_base) {
#pragma unroll
  for (int x = 0; x < TileTraits::kScoreSteps / 2; ++x) {  // 32 dims an ldmatrix.x4: two k16 steps
    uint32_t b[4];
    ptx::ldmatrix_x4(b, k_base + x * 64);
    ptx::mma_bf16_16x8x16(score[0], q.a[2 * x], b[0], b[1]);
    ptx::mma_bf16_16x8x16(score[0], q.a[2 * x + 1], b[2], b[3]);
  }
}

// Scales the scores to the log2 domain; keys without a visible slot
// (`visible(key)`, visible_keys) score -inf. Returns this thread's maximum
// of head g (x) and head g + 8 (y). n8 tile j holds keys key0 + 8j.
template <int kTiles, class Visible>
__device__ __forceinline__ float2 mask_scores(float (&score)[kTiles][4], int key0, int t, const Visible& visible,
                                              float scale_log2) {
  float top = -INFINITY, bottom = -INFINITY;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool valid = visible(key0 + 8 * j + 2 * t + (e % 2));
      score[j][e] = valid ? score[j][e] * scale_log2 : -INFINITY;
      if (e < 2) top = fmaxf(top, score[j][e]);
      else bottom = fmaxf(bottom, score[j][e]);
    }
  return make_float2(top, bottom);
}

}  // namespace sparse_decode::dsa
