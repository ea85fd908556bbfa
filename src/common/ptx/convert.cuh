// Conversions between float and the 16- and 8-bit formats, in registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace sparse_decode::ptx {

// Two floats rounded to BF16 (FP16), `lo` in the low half, as 32 bits.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}
__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// The two E4M3 bytes in the low (kHighHalf: high) half of `bytes`, low byte
// first -> two FP16 (low half first), exact. The half is an operand of the
// one conversion instruction (F2FP ... R.H1): no shift.
template <bool kHighHalf>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t bytes) {
  uint32_t halves;
  if constexpr (kHighHalf) {
    asm("{ .reg .b16 low, high;\n mov.b32 {low, high}, %1;\n cvt.rn.f16x2.e4m3x2 %0, high; }\n"
        : "=r"(halves)
        : "r"(bytes));
  } else {
    asm("{ .reg .b16 low, high;\n mov.b32 {low, high}, %1;\n cvt.rn.f16x2.e4m3x2 %0, low; }\n"
        : "=r"(halves)
        : "r"(bytes));
  }
  return halves;
}

}  // namespace sparse_decode::ptx
