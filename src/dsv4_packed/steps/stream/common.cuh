// What every step of the packed stream kernel shares: the names of its
// configuration and shared-memory plan, the P V accumulator, a head's
// softmax statistics, the math warps' barrier, and the arithmetic of the
// scale exponent: the power of two (O = acc 2^e) that each math thread's
// accumulator of a (head, scale tile) carries across chunks.
#pragma once

#include <cstdint>

#include "common/ptx/sync.cuh"
#include "dsv4_packed/stream_smem.cuh"

namespace sparse_decode::dsv4_packed::stream {

using Traits = StreamTraits;
using Smem = StreamSmem;

// The scale exponent of an accumulator that has seen nothing yet: any real one is larger.
inline constexpr int kNoExponent = -(1 << 20);

// A warp's P V accumulator: its 64 dims of heads lane / 4 (values 0, 1)
// and lane / 4 + 8 (2, 3): [dim block][16-dim half][n-tile][4].
using DimFragment = float[2][2][2][4];

// Softmax statistics of one head: the running max (log2 domain) and sum.
struct HeadStats {
  float max;
  float sum;
};

__device__ __forceinline__ void math_sync() { ptx::named_barrier_sync(Traits::kMathBarrier, Traits::kThreads); }

// 2^k for k <= 127; 0 below the normal range (k < -126).
__device__ __forceinline__ float pow2(int k) { return k < -126 ? 0.0f : __int_as_float((k + 127) << 23); }

// A share's scale exponent plus its weight's exponent (kNoExponent for
// weight 0): the larger of two sets their common scale exponent when they
// are folded, so that the share that dominates keeps its bits.
__device__ __forceinline__ int weighted_exponent(int exponent, float weight) {
  return weight > 0.0f ? exponent + static_cast<int>(__float_as_uint(weight) >> 23) - 127 : kNoExponent;
}

}  // namespace sparse_decode::dsv4_packed::stream
