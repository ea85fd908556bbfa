// P V of a chunk: mma.sync over the KV tile's rows as V (FP8 converted
// exactly to FP16, or BF16) with the chunk's probabilities.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4/smem.cuh"
#include "dsv4/steps/query.cuh"

namespace sparse_decode::dsv4 {

// Shared-memory address of byte `byte` of row `row` of KV tile `kv_tile`.
template <class Traits>
__device__ __forceinline__ uint32_t kv_address(const ChunkSmem<Traits>& s, int kv_tile, int row, int byte) {
  return ptx::smem_address(&s.kv[kv_tile][row][byte]);
}

// Shared-memory address of this lane's ldmatrix.x4 rows of P for head tile 0
// (rows = heads, 16 columns from column 0); head tile t is 16 rows further.
template <class Traits>
__device__ __forceinline__ uint32_t prob_fragment_base(const ChunkSmem<Traits>& s, int part, int slot) {
  const int lane = threadIdx.x % 32;
  return ptx::smem_address(&s.probs[slot][part][(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
}

// The warp's index among the warps that run P V (warps kWarps.. with P V warps).
template <class Traits>
__device__ __forceinline__ int pv_warp() {
  return static_cast<int>((threadIdx.x - (Traits::kPvWarps > 0 ? Traits::kThreads : 0)) / 32);
}
template <class Traits>
inline constexpr uint32_t kProbTileBytes = 16 * Traits::kProbRowHalves * 2;

// O += P V from the BF16 KV tile, dim blocks [first_block, first_block + kBlocks)
// of the warp: ldmatrix.trans of a core matrix (8 rows x 8 dims) is a B
// fragment as it is, so an ldmatrix.x4.trans gives the two n-tiles of 8 dims
// of a 16-dim half (granule_dim() says which dims a thread holds), used by
// every head tile. P is BF16 hi + lo: two MMAs a step, the small part first.
template <class Traits, int kBlocks>
__device__ __forceinline__ void accumulate_dims_bf16(ChunkSmem<Traits>& s, int kv_tile,
                                                     DimBlockFragment<Traits, kBlocks>& acc, int first_block,
                                                     int slot) {
  constexpr int kTiles = Traits::kHeadTiles;
  const int warp = pv_warp<Traits>(), lane = threadIdx.x % 32;
  const uint32_t hi_base = prob_fragment_base<Traits>(s, 0, slot), lo_base = prob_fragment_base<Traits>(s, 1, slot);
  // Matrices of an ldmatrix.x4.trans: rows k..k+7 / k+8..k+15 (8-row halves) x dims d..d+7 / d+8..d+15 (pieces).
  const int piece0 = (warp * Traits::kDimsPerWarp + first_block * 32) / 8 + (lane >> 4);
  const uint32_t v_base = kv_address<Traits>(s, kv_tile, ((lane >> 3) & 1) * 8 + (lane & 7), piece0 * 16);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t hi[kTiles][4], lo[kTiles][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      ptx::ldmatrix_x4(hi[t], hi_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
      ptx::ldmatrix_x4(lo[t], lo_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
    }
#pragma unroll
    for (int block = 0; block < kBlocks; ++block)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(
            r, v_base + kk * Traits::kTileRows16Bytes + (4 * block + 2 * half) * Traits::kTilePieceBytes);
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          ptx::mma_bf16_16x8x16(acc[t][block][half][0], lo[t], r[0], r[1]);
          ptx::mma_bf16_16x8x16(acc[t][block][half][1], lo[t], r[2], r[3]);
          ptx::mma_bf16_16x8x16(acc[t][block][half][0], hi[t], r[0], r[1]);
          ptx::mma_bf16_16x8x16(acc[t][block][half][1], hi[t], r[2], r[3]);
        }
      }
  }
}

// O += P V from the FP8 KV tile, dim blocks [first_block, first_block + kBlocks)
// of the warp: ldmatrix.trans on byte pairs, then a byte permute splits each
// pair into the even-dim and odd-dim B fragments, converted exactly to FP16
// once and used by every head tile. So n-tile (half, parity) column n is dim
// 16*half + 2n + parity, and a thread ends up holding 4 consecutive dims of
// its heads. With one dim block (the 64-head stream kernel, short of
// registers) each head tile's P fragment is loaded just before its MMAs;
// with more, all head tiles' fragments are loaded once a k-step.
template <class Traits, int kBlocks>
__device__ __forceinline__ void accumulate_dims_fp8(ChunkSmem<Traits>& s, int kv_tile,
                                                    DimBlockFragment<Traits, kBlocks>& acc, int first_block,
                                                    int slot) {
  constexpr int kTiles = Traits::kHeadTiles;
  constexpr bool kLoadPerTile = kBlocks == 1 && kTiles > 1;
  const int warp = pv_warp<Traits>(), lane = threadIdx.x % 32;
  const int d0 = warp * Traits::kDimsPerWarp + first_block * 32;
  const uint32_t p_base = prob_fragment_base<Traits>(s, 0, slot);
  // Matrices of an ldmatrix.x4: rows k..k+7 / k+8..k+15 (8-row halves) x dims d..d+15 / d+16..d+31 (pieces).
  const uint32_t v_base = kv_address<Traits>(s, kv_tile, ((lane >> 3) & 1) * 8 + (lane & 7), (d0 / 16 + (lane >> 4)) * 16);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t a[kLoadPerTile ? 1 : kTiles][4];
    if constexpr (!kLoadPerTile) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        ptx::ldmatrix_x4(a[t], p_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
      }
    }
#pragma unroll
    for (int block = 0; block < kBlocks; ++block) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * Traits::kTileRows16Bytes + block * 2 * Traits::kTilePieceBytes);
      uint32_t b[2][2][2];  // [half][even / odd dims][rows k.. / k+8..]
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // bytes (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
        const uint32_t rows_lo = __byte_perm(r[2 * half], 0, 0x3120);
        const uint32_t rows_hi = __byte_perm(r[2 * half + 1], 0, 0x3120);
        b[half][0][0] = ptx::e4m3x2_to_f16x2<false>(rows_lo), b[half][0][1] = ptx::e4m3x2_to_f16x2<false>(rows_hi);
        b[half][1][0] = ptx::e4m3x2_to_f16x2<true>(rows_lo), b[half][1][1] = ptx::e4m3x2_to_f16x2<true>(rows_hi);
      }
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        if constexpr (kLoadPerTile) ptx::ldmatrix_x4(a[0], p_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
        const uint32_t(&tile_a)[4] = a[kLoadPerTile ? 0 : t];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          ptx::mma_f16_16x8x16(acc[t][block][half][0], tile_a, b[half][0][0], b[half][0][1]);
          ptx::mma_f16_16x8x16(acc[t][block][half][1], tile_a, b[half][1][0], b[half][1][1]);
        }
      }
    }
  }
}

// O += P V for kBlocks of the warp's dim blocks from first_block (the
// fragment's values as they stand: the caller zeroes or rescales them),
// with the probabilities of chunk slot `slot`.
template <class Traits, int kBlocks>
__device__ __forceinline__ void accumulate_dims(ChunkSmem<Traits>& s, int kv_tile,
                                                DimBlockFragment<Traits, kBlocks>& acc, int first_block,
                                                int slot) {
  if constexpr (Traits::kBf16) {
    accumulate_dims_bf16<Traits, kBlocks>(s, kv_tile, acc, first_block, slot);
  } else {
    accumulate_dims_fp8<Traits, kBlocks>(s, kv_tile, acc, first_block, slot);
  }
}

// O += P V for the warp's dims this CTA outputs (O restarts at the first chunk of a group).
template <class Traits>
__device__ __forceinline__ void accumulate_chunk(ChunkSmem<Traits>& s, int kv_tile, OutputFragment<Traits>& acc,
                                                 bool group_start, int slot) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < Traits::kHeadTiles; ++t) {
    // A group starts from +0 (not from 0 * the previous group: -0 and NaN would survive).
    const float top = s.rescale[slot][16 * t + lane / 4], bottom = s.rescale[slot][16 * t + lane / 4 + 8];
#pragma unroll
    for (int block = 0; block < Traits::kOutputDimBlocks; ++block)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int par = 0; par < 2; ++par) {
          float(&a)[4] = acc[t][block][h][par];
          a[0] = group_start ? 0.0f : __fmul_rn(a[0], top), a[1] = group_start ? 0.0f : __fmul_rn(a[1], top);
          a[2] = group_start ? 0.0f : __fmul_rn(a[2], bottom), a[3] = group_start ? 0.0f : __fmul_rn(a[3], bottom);
        }
  }
  accumulate_dims<Traits, Traits::kOutputDimBlocks>(s, kv_tile, acc, first_output_dim_block<Traits>(), slot);
}

}  // namespace sparse_decode::dsv4
