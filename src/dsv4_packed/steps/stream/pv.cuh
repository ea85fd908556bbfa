// O = P V of the packed stream kernel: FP16 mma.sync on the E4M3 bytes
// with the scales folded into P (warps 0..6, one scale tile each), BF16
// mma.sync on the BF16 dims (warp 7).
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4_packed/steps/stream/common.cuh"

namespace sparse_decode::dsv4_packed::stream {

// O *= factor: `top` on head lane / 4, `bottom` on head lane / 4 + 8.
__device__ __forceinline__ void rescale_fragment(DimFragment& acc, float top, float bottom) {
#pragma unroll
  for (int db = 0; db < 2; ++db)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        acc[db][half][n][0] *= top, acc[db][half][n][1] *= top;
        acc[db][half][n][2] *= bottom, acc[db][half][n][3] *= bottom;
      }
}

// The FP16 B fragments of half `half` (16 dims) of 16 keys x 32 dims of
// E4M3 V, as an ldmatrix.x4.trans gave them in `r`: the even dims' pair and
// the odd dims' pair (exact conversions).
__device__ __forceinline__ void v_half_to_f16(const uint32_t (&r)[4], int half, uint32_t (&even)[2],
                                              uint32_t (&odd)[2]) {
  // bytes (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
  const uint32_t rows_lo = __byte_perm(r[2 * half], 0, 0x3120);
  const uint32_t rows_hi = __byte_perm(r[2 * half + 1], 0, 0x3120);
  even[0] = ptx::e4m3x2_to_f16x2<false>(rows_lo), even[1] = ptx::e4m3x2_to_f16x2<false>(rows_hi);
  odd[0] = ptx::e4m3x2_to_f16x2<true>(rows_lo), odd[1] = ptx::e4m3x2_to_f16x2<true>(rows_hi);
}

// P V of scale tile w (warp w < 7, dims 64w .. 64w + 63). The weight of
// column c for head h is P[h][c] 2^(s[c] - 127); as bits, P's plus s << 23
// (the "key": P of an active column is a normal float, and a masked
// column has P = 0 and s = 0, so key 0), whose largest value gives the
// chunk's scale exponent of the head. The accumulator's scale exponent E
// (O = acc 2^E) becomes E' = max(E + log2 of the rescale, the chunk's): acc
// is scaled by rescale * 2^(E - E') (below 2), and each weight enters as
// key - (E' + 127) << 23, a float below 2 (flushed to 0 under 2^-126: FP16
// would lose it).
__device__ __forceinline__ void accumulate_scaled_tile(Smem& s, int buffer, DimFragment& acc, int (&exponent)[2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // keys[k-step][head: top, bottom][columns 2t, 2t + 1 | 2t + 8, 2t + 9]
  uint32_t keys[4][2][4];
  uint32_t best[2] = {0, 0};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint2 scale_lo = *reinterpret_cast<const uint2*>(&s.scale_bits[buffer][warp][16 * kk + 2 * t]);
    const uint2 scale_hi = *reinterpret_cast<const uint2*>(&s.scale_bits[buffer][warp][16 * kk + 2 * t + 8]);
    const uint32_t shifts[4] = {scale_lo.x, scale_lo.y, scale_hi.x, scale_hi.y};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint2 p_lo = *reinterpret_cast<const uint2*>(&s.probs[g + 8 * h][16 * kk + 2 * t]);
      const uint2 p_hi = *reinterpret_cast<const uint2*>(&s.probs[g + 8 * h][16 * kk + 2 * t + 8]);
      const uint32_t bits[4] = {p_lo.x, p_lo.y, p_hi.x, p_hi.y};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        keys[kk][h][c] = bits[c] + shifts[c];
        best[h] = max(best[h], keys[kk][h][c]);
      }
    }
  }
  uint32_t floor_bits[2];
  float factor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    best[h] = max(best[h], __shfl_xor_sync(0xffffffffu, best[h], 1));
    best[h] = max(best[h], __shfl_xor_sync(0xffffffffu, best[h], 2));
    const float rescale = s.rescale[g + 8 * h];
    const int chunk_exponent = static_cast<int>(best[h] >> 23) - 254;
    const int rescale_log2 = static_cast<int>(__float_as_uint(rescale) >> 23) - 127;
    // At least -127, so that a masked column's key 0 is below the floor.
    const int new_exponent = max(max(exponent[h] + rescale_log2, chunk_exponent), -127);
    factor[h] = rescale * pow2(exponent[h] - new_exponent);
    floor_bits[h] = static_cast<uint32_t>(new_exponent + 127) << 23;
    exponent[h] = new_exponent;
  }
  rescale_fragment(acc, factor[0], factor[1]);
  auto weight = [&](uint32_t key, int h) { return __int_as_float(max(static_cast<int>(key - floor_bits[h]), 0)); };
  const uint32_t v_base =
      ptx::smem_address(&s.kv[buffer][((lane >> 3) & 1) * 8 + (lane & 7)][(warp * 4 + (lane >> 4)) * 16]);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    // A fragment: (top, 2t..), (bottom, 2t..), (top, 2t+8..), (bottom, 2t+8..).
    const uint32_t a[4] = {ptx::half2_bits(weight(keys[kk][0][0], 0), weight(keys[kk][0][1], 0)),
                           ptx::half2_bits(weight(keys[kk][1][0], 1), weight(keys[kk][1][1], 1)),
                           ptx::half2_bits(weight(keys[kk][0][2], 0), weight(keys[kk][0][3], 0)),
                           ptx::half2_bits(weight(keys[kk][1][2], 1), weight(keys[kk][1][3], 1))};
#pragma unroll
    for (int db = 0; db < 2; ++db) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kTileRowBytes + db * 32);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t even[2], odd[2];
        v_half_to_f16(r, half, even, odd);
        ptx::mma_f16_16x8x16(acc[db][half][0], a, even[0], even[1]);
        ptx::mma_f16_16x8x16(acc[db][half][1], a, odd[0], odd[1]);
      }
    }
  }
}

// P V of the BF16 dims (warp 7, dims 448..511): P as BF16 hi + lo (16
// significant bits), V by ldmatrix.trans from the KV tile as it is.
__device__ __forceinline__ void accumulate_tail(Smem& s, int buffer, DimFragment& acc) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  rescale_fragment(acc, s.rescale[g], s.rescale[g + 8]);
  const uint32_t v_base = ptx::smem_address(
      &s.kv[buffer][((lane >> 3) & 1) * 8 + (lane & 7)][Traits::kTailByte + (lane >> 4) * 16]);
  auto split = [](float2 p, uint32_t& hi, uint32_t& lo) {
    hi = ptx::bf16x2_bits(p.x, p.y);
    const float hx = __uint_as_float(hi << 16), hy = __uint_as_float(hi & 0xffff0000u);
    lo = ptx::bf16x2_bits(p.x - hx, p.y - hy);
  };
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t hi[4], lo[4];
    split(*reinterpret_cast<const float2*>(&s.probs[g][16 * kk + 2 * t]), hi[0], lo[0]);
    split(*reinterpret_cast<const float2*>(&s.probs[g + 8][16 * kk + 2 * t]), hi[1], lo[1]);
    split(*reinterpret_cast<const float2*>(&s.probs[g][16 * kk + 2 * t + 8]), hi[2], lo[2]);
    split(*reinterpret_cast<const float2*>(&s.probs[g + 8][16 * kk + 2 * t + 8]), hi[3], lo[3]);
#pragma unroll
    for (int db = 0; db < 2; ++db)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kTileRowBytes + (4 * db + 2 * half) * 16);
        ptx::mma_bf16_16x8x16(acc[db][half][0], lo, r[0], r[1]);
        ptx::mma_bf16_16x8x16(acc[db][half][1], lo, r[2], r[3]);
        ptx::mma_bf16_16x8x16(acc[db][half][0], hi, r[0], r[1]);
        ptx::mma_bf16_16x8x16(acc[db][half][1], hi, r[2], r[3]);
      }
  }
}

}  // namespace sparse_decode::dsv4_packed::stream
