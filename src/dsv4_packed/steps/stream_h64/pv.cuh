// O = P V of the packed stream kernel's 64-head form: the 16-head step
// (steps/stream/pv.cuh) for a warpgroup's two head tiles, each V fragment
// loaded and converted once for both; the chunk's scale exponent of each
// (head, scale tile) from the softmax's largest key.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream/pv.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// P V of scale tile `tile` (dims 64 tile .. 64 tile + 63) for the heads
// from first_head (a warpgroup's 32), by the 16-head rule: a weight is
// key - (E' + 127) << 23 as a float, E' the accumulator's new scale
// exponent of the (head, scale tile).
__device__ __forceinline__ void accumulate_scaled_tile(Smem& s, int buffer, int tile, int first_head,
                                                       HeadTileFragments& acc, HeadTileExponents& exponent) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  uint32_t floor_bits[Traits::kWarpgroupHeadTiles][2];
#pragma unroll
  for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
    float factor[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = first_head + 16 * ht + g + 8 * h;
      const float rescale = s.rescale[head];
      const int chunk_exponent = static_cast<int>(s.best_key[tile][head] >> 23) - 254;
      const int rescale_log2 = static_cast<int>(__float_as_uint(rescale) >> 23) - 127;
      // At least -127, so that a masked column's key 0 is below the floor.
      const int new_exponent = max(max(exponent[ht][h] + rescale_log2, chunk_exponent), -127);
      factor[h] = rescale * pow2(exponent[ht][h] - new_exponent);
      floor_bits[ht][h] = static_cast<uint32_t>(new_exponent + 127) << 23;
      exponent[ht][h] = new_exponent;
    }
    stream::rescale_fragment(acc[ht], factor[0], factor[1]);
  }
  auto weight = [&](uint32_t key, uint32_t floor) { return __int_as_float(max(static_cast<int>(key - floor), 0)); };
  const uint32_t v_base =
      ptx::smem_address(&s.kv[buffer][((lane >> 3) & 1) * 8 + (lane & 7)][(tile * 4 + (lane >> 4)) * 16]);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint2 scale_lo = *reinterpret_cast<const uint2*>(&s.scale_bits[buffer][tile][16 * kk + 2 * t]);
    const uint2 scale_hi = *reinterpret_cast<const uint2*>(&s.scale_bits[buffer][tile][16 * kk + 2 * t + 8]);
    // A fragments: (top, 2t..), (bottom, 2t..), (top, 2t+8..), (bottom, 2t+8..) of each head tile.
    uint32_t a[Traits::kWarpgroupHeadTiles][4];
#pragma unroll
    for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int head = first_head + 16 * ht + g + 8 * h;
        const uint2 p_lo = *reinterpret_cast<const uint2*>(&s.probs[head][16 * kk + 2 * t]);
        const uint2 p_hi = *reinterpret_cast<const uint2*>(&s.probs[head][16 * kk + 2 * t + 8]);
        const uint32_t floor = floor_bits[ht][h];
        a[ht][h] = ptx::half2_bits(weight(p_lo.x + scale_lo.x, floor), weight(p_lo.y + scale_lo.y, floor));
        a[ht][2 + h] = ptx::half2_bits(weight(p_hi.x + scale_hi.x, floor), weight(p_hi.y + scale_hi.y, floor));
      }
    }
#pragma unroll
    for (int db = 0; db < 2; ++db) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kTileRowBytes + db * 32);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t even[2], odd[2];
        stream::v_half_to_f16(r, half, even, odd);
#pragma unroll
        for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
          ptx::mma_f16_16x8x16(acc[ht][db][half][0], a[ht], even[0], even[1]);
          ptx::mma_f16_16x8x16(acc[ht][db][half][1], a[ht], odd[0], odd[1]);
        }
      }
    }
  }
}

// P V of the BF16 dims (448..511) for the heads from first_head: P as BF16
// hi + lo, each V fragment loaded once for the two head tiles.
__device__ __forceinline__ void accumulate_tail(Smem& s, int buffer, int first_head, HeadTileFragments& acc) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
    const int top = first_head + 16 * ht + g;
    stream::rescale_fragment(acc[ht], s.rescale[top], s.rescale[top + 8]);
  }
  const uint32_t v_base = ptx::smem_address(
      &s.kv[buffer][((lane >> 3) & 1) * 8 + (lane & 7)][Traits::kTailByte + (lane >> 4) * 16]);
  auto split = [](float2 p, uint32_t& hi, uint32_t& lo) {
    hi = ptx::bf16x2_bits(p.x, p.y);
    const float hx = __uint_as_float(hi << 16), hy = __uint_as_float(hi & 0xffff0000u);
    lo = ptx::bf16x2_bits(p.x - hx, p.y - hy);
  };
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t hi[Traits::kWarpgroupHeadTiles][4], lo[Traits::kWarpgroupHeadTiles][4];
#pragma unroll
    for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
      const int top = first_head + 16 * ht + g, bottom = top + 8;
      split(*reinterpret_cast<const float2*>(&s.probs[top][16 * kk + 2 * t]), hi[ht][0], lo[ht][0]);
      split(*reinterpret_cast<const float2*>(&s.probs[bottom][16 * kk + 2 * t]), hi[ht][1], lo[ht][1]);
      split(*reinterpret_cast<const float2*>(&s.probs[top][16 * kk + 2 * t + 8]), hi[ht][2], lo[ht][2]);
      split(*reinterpret_cast<const float2*>(&s.probs[bottom][16 * kk + 2 * t + 8]), hi[ht][3], lo[ht][3]);
    }
#pragma unroll
    for (int db = 0; db < 2; ++db)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kTileRowBytes + (4 * db + 2 * half) * 16);
#pragma unroll
        for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
          ptx::mma_bf16_16x8x16(acc[ht][db][half][0], lo[ht], r[0], r[1]);
          ptx::mma_bf16_16x8x16(acc[ht][db][half][1], lo[ht], r[2], r[3]);
          ptx::mma_bf16_16x8x16(acc[ht][db][half][0], hi[ht], r[0], r[1]);
          ptx::mma_bf16_16x8x16(acc[ht][db][half][1], hi[ht], r[2], r[3]);
        }
      }
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
