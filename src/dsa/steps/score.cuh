// The split kernel's scores: S = Q K^T of a warp's 16 keys by mma.sync
// m16n8k16 BF16 (the row's heads are M = 16), scaled to the log2 domain
// and masked where a key holds no visible slot.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsa/smem.cuh"

namespace sparse_decode::dsa {

// This lane's ldmatrix addresses in KV tile buffer 0: Q as the A operand
// (rows = heads), K as B (n = keys), V as B transposed (k = keys); key0 is
// the warp's first key of the tile.
struct TileAddresses {
  uint32_t q;
  uint32_t k;
  uint32_t v;
};

template <bool kFp8>
__device__ __forceinline__ TileAddresses tile_addresses(SplitSmem<kFp8>& s, int key0, int lane) {
  TileAddresses a;
  a.q = ptx::smem_address(&s.q[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  a.k = ptx::smem_address(&s.tiles.kv[0].k[key0 + (lane & 7) + ((lane >> 4) << 3)][((lane >> 3) & 1) * 8]);
  a.v = ptx::smem_address(&s.tiles.kv[0].v[key0 + (lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  return a;
}

// Adds Q K^T of this warp's 16 keys to `score`: two n8 tiles, C fragments
// (heads g and g + 8, keys 8j + 2t and + 1).
__device__ __forceinline__ void score_tile(float (&score)[2][4], uint32_t q_base, uint32_t k_base) {
#pragma unroll
  for (int kk = 0; kk < SplitTraits::kScoreSteps; ++kk) {
    uint32_t a[4], b[4];
    ptx::ldmatrix_x4(a, q_base + kk * 32);
    ptx::ldmatrix_x4(b, k_base + kk * 32);
    ptx::mma_bf16_16x8x16(score[0], a, b[0], b[1]);
    ptx::mma_bf16_16x8x16(score[1], a, b[2], b[3]);
  }
}

// Scales the scores to the log2 domain; keys without a visible slot
// (`visible(key)`, visible_keys) score -inf. Returns this thread's maximum
// of head g (x) and head g + 8 (y).
template <class Visible>
__device__ __forceinline__ float2 mask_scores(float (&score)[2][4], int key0, int t, const Visible& visible,
                                              float scale_log2) {
  float top = -INFINITY, bottom = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j)
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
