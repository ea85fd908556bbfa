// The gate of dsa_decode (docs/formats/dsa_layout.md, decision 1: float32
// sigmoid with a rounded division), applied by whichever kernel stores the
// output.
#pragma once

#include <cstdint>

#include "common/ptx/load.cuh"
#include "dsa/params.h"
#include "dsa/steps/convert.cuh"

namespace sparse_decode::dsa {

// The gate's input for a head of the row as a float (0 without a gate); an
// L2 load that ptxas may not sink, so the combine issues it with its others.
__device__ __forceinline__ float gate_input(const DsaParams& p, int64_t row, int head) {
  if (!p.gate) return 0.0f;
  const int64_t token = row / p.groups;
  const int64_t index = token * p.gate_token_stride + (row % p.groups) * p.heads + head;
  return p.gate_is_f32 ? ptx::load_l2(static_cast<const float*>(p.gate) + index)
                       : bf16_bits_to_float(ptx::load_l2(static_cast<const uint16_t*>(p.gate) + index));
}

// The factor the gate puts on a head's output: sigmoid(x), rounded to BF16
// with a BF16 gate; 1 without a gate.
__device__ __forceinline__ float gate_of(const DsaParams& p, float x) {
  if (!p.gate) return 1.0f;
  const float sigmoid = __fdiv_rn(1.0f, 1.0f + expf(-x));
  return p.gate_is_f32 ? sigmoid : bf16_bits_to_float(float_to_bf16_bits(sigmoid));
}

__device__ __forceinline__ float gate_factor(const DsaParams& p, int64_t row, int head) {
  return gate_of(p, gate_input(p, row, head));
}

}  // namespace sparse_decode::dsa
