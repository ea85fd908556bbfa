// The gate of dsa_decode (docs/formats/dsa_layout.md, decision 1: float32
// sigmoid with a rounded division), applied by whichever kernel stores the
// output.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "common/ptx/load.cuh"
#include "dsa/params.h"
#include "dsa/steps/convert.cuh"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::dsa {

// The gate's input for a head of the row as a float (0 without a gate); an
// L2 load that ptxas may not sink, so the combine issues it with its others.
__device__ __forceinline__ float gate_input(const DsaParams& p, int64_t row, int head) {
  if (!p.gate) return 0.0f;
  const int64_t token = row / p.groups;
  const int64_t index = token * p.gate_token_stride + (row % p.groups) * p.heads + head;
  constexpr int32_t kFloat32 = static_cast<int32_t>(DsaGateDType::kFloat32);
  constexpr int32_t kFloat16 = static_cast<int32_t>(DsaGateDType::kFloat16);
  if (p.gate_dtype == kFloat32) return ptx::load_l2(static_cast<const float*>(p.gate) + index);
  const uint16_t bits = ptx::load_l2(static_cast<const uint16_t*>(p.gate) + index);
  return p.gate_dtype == kFloat16 ? __half2float(__ushort_as_half(bits)) : bf16_bits_to_float(bits);
}

// The factor the gate puts on a head's output: sigmoid(x), rounded to the
// gate's dtype (BF16 or FP16; float32 as computed); 1 without a gate.
__device__ __forceinline__ float gate_of(const DsaParams& p, float x) {
  if (!p.gate) return 1.0f;
  const float sigmoid = __fdiv_rn(1.0f, 1.0f + expf(-x));
  if (p.gate_dtype == static_cast<int32_t>(DsaGateDType::kFloat32)) return sigmoid;
  if (p.gate_dtype == static_cast<int32_t>(DsaGateDType::kFloat16)) return __half2float(__float2half_rn(sigmoid));
  return bf16_bits_to_float(float_to_bf16_bits(sigmoid));
}

__device__ __forceinline__ float gate_factor(const DsaParams& p, int64_t row, int head) {
  return gate_of(p, gate_input(p, row, head));
}

}  // namespace sparse_decode::dsa
