// The key tile of the packed stream kernel's 64-head form: a chunk's raw
// rows dequantized once, by both math warpgroups, into BF16 that serves as
// K (S) and V (P V). A row's E4M3 dims of scale tile t become
// e4m3 * 2^(byte_t - r) and its BF16 dims bf16 * 2^(127 - r), r the row's
// key byte (its largest scale byte, at least kLeastKeyByte): exact unless
// a tile lies some 2^117 below the row's largest (BF16's subnormals, then
// zero, below 2^-126), so that the row is 2^(r - 127) times the tile:
// that factor multiplies the row's score and, folded into P, its values.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include "common/ptx/convert.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// The least key byte: the BF16 dims times 2^(127 - r) stay below 2^103 times their value.
inline constexpr uint32_t kLeastKeyByte = 24;

// Two values of the row (two FP16, exact) times `factor`, as two BF16 (exact).
__device__ __forceinline__ uint32_t scaled_bf16x2(uint32_t halves, float factor) {
  const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&halves));
  return ptx::bf16x2_bits(v.x * factor, v.y * factor);
}
// Two BF16 values times `factor` (a power of two), as two BF16.
__device__ __forceinline__ uint32_t rescaled_bf16x2(uint32_t pair, float factor) {
  return ptx::bf16x2_bits(__uint_as_float(pair << 16) * factor, __uint_as_float(pair & 0xffff0000u) * factor);
}

// Thread (row r = tid % 64, quarter q = tid / 64) converts 16-dim blocks
// q, q + 4, ..., q + 24 of row r (block q + 4t lies in scale tile t) and
// copies BF16 pieces q and q + 4: a warp's 32 lanes take 32 rows of one
// block, so that 8 lanes read 8 rows 37 units of 16 bytes apart (distinct
// banks) and write one core matrix (128 contiguous bytes).
__device__ __forceinline__ void dequantize_chunk(Smem& s, int buffer) {
  constexpr int kQuarters = Traits::kThreads / Traits::kChunkColumns;
  static_assert(kQuarters * Traits::kScaleTiles == Traits::kFp8Blocks && kQuarters * 2 == Traits::kTailPieces,
                "each thread converts one block a scale tile and copies two BF16 pieces of its row");
  const int row = threadIdx.x % Traits::kChunkColumns, quarter = threadIdx.x / Traits::kChunkColumns;
  const uint8_t* raw = s.kv[buffer][row];
  uint32_t bytes[Traits::kScaleTiles];
  uint32_t key = kLeastKeyByte;
#pragma unroll
  for (int t = 0; t < Traits::kScaleTiles; ++t) {
    bytes[t] = s.scale_bits[buffer][t][row] >> 23;
    key = max(key, bytes[t]);
  }
  uint4 block[Traits::kScaleTiles];
#pragma unroll
  for (int t = 0; t < Traits::kScaleTiles; ++t) {
    block[t] = *reinterpret_cast<const uint4*>(raw + 16 * (quarter + 4 * t));
  }
  uint4 tail[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tail[i] = *reinterpret_cast<const uint4*>(raw + Traits::kTailByte + 16 * (quarter + 4 * i));
  }
  uint8_t(&keys)[Traits::kPieces][8][16] = s.keys[row / 8];
#pragma unroll
  for (int t = 0; t < Traits::kScaleTiles; ++t) {
    const float factor = pow2(static_cast<int>(bytes[t]) - static_cast<int>(key));
    const uint32_t w[4] = {block[t].x, block[t].y, block[t].z, block[t].w};
    uint32_t h[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // word k: dims 4k, 4k + 1 (low half), 4k + 2, 4k + 3
      h[2 * k] = scaled_bf16x2(ptx::e4m3x2_to_f16x2<false>(w[k]), factor);
      h[2 * k + 1] = scaled_bf16x2(ptx::e4m3x2_to_f16x2<true>(w[k]), factor);
    }
    const int piece = 2 * (quarter + 4 * t);
    *reinterpret_cast<uint4*>(&keys[piece][row % 8][0]) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(&keys[piece + 1][row % 8][0]) = make_uint4(h[4], h[5], h[6], h[7]);
  }
  const float tail_factor = pow2(127 - static_cast<int>(key));
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    *reinterpret_cast<uint4*>(&keys[Traits::kFp8Pieces + quarter + 4 * i][row % 8][0]) =
        make_uint4(rescaled_bf16x2(tail[i].x, tail_factor), rescaled_bf16x2(tail[i].y, tail_factor),
                   rescaled_bf16x2(tail[i].z, tail_factor), rescaled_bf16x2(tail[i].w, tail_factor));
  }
  if (quarter == 0) s.key_bits[row] = key << 23;
  if (threadIdx.x == 0) s.key_mask = *reinterpret_cast<const uint64_t*>(s.column_mask[buffer]);
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
