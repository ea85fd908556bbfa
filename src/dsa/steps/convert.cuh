// Conversions of the split kernel: BF16 bits in registers (rounded as the
// reference rounds) and the FP8 staging buffer -> K/V tile step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "dsa/smem.cuh"

namespace sparse_decode::dsa {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) { return __uint_as_float(uint32_t{bits} << 16); }

__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const __nv_bfloat16 b = __float2bfloat16_rn(value);
  return *reinterpret_cast<const uint16_t*>(&b);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return uint32_t{float_to_bf16_bits(lo)} | (uint32_t{float_to_bf16_bits(hi)} << 16);
}

// FP8: converts staging buffer `buffer` into the K/V tile (every thread of
// the split kernel's CTA), exactly: K to
// BF16 (q is BF16), V to FP16, so that P V takes P in FP16 (one MMA, where
// BF16 P needs hi + lo).
__device__ __forceinline__ void convert_tile(SplitSmem<true>& s, int buffer) {
  using T = TileTraits;
  constexpr int kSlotPieces = kDsaSlotDim / 16, kHalfPieces = kSlotPieces / 2;
  for (int x = threadIdx.x; x < T::kKeys * kSlotPieces; x += SplitKernelTraits::kThreads) {
    const int key = x / kSlotPieces, piece = x % kSlotPieces;
    const uint4 bytes = *reinterpret_cast<const uint4*>(&s.staging[buffer][key][piece * 16]);
    const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
    const bool is_key = piece < kHalfPieces;
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint16_t pair = static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2)));
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      if (is_key) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        out[i] = pack_bf16(f.x, f.y);  // K as BF16 for BF16 q (exact: E4M3 values are BF16 values)
      } else {
        out[i] = uint32_t{h.x} | (uint32_t{h.y} << 16);  // V as FP16 (exact), so P can be FP16
      }
    }
    uint16_t* dst =
        piece < kHalfPieces ? &s.tiles.kv[0].k[key][piece * 16] : &s.tiles.kv[0].v[key][(piece - kHalfPieces) * 16];
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

}  // namespace sparse_decode::dsa
