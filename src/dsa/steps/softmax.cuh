// The split kernel's online softmax (log2 domain): the tile's maximum of
// each head goes through shared memory; each warp keeps its own share of
// the sums, rescaled by the common maximum.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "dsa/smem.cuh"
#include "dsa/steps/convert.cuh"

namespace sparse_decode::dsa {

// The online softmax state of this thread's two heads (lane / 4 and + 8).
struct HeadPair {
  float max[2] = {-INFINITY, -INFINITY};  // log2 domain, CTA-wide over the keys so far
  float sum[2] = {0.0f, 0.0f};            // this thread's share of the sum (its key columns)
};

// Writes the warp's maximum of heads g and g + 8 (`max`: this thread's)
// into warp_max; the caller's barrier makes them visible.
template <class Smem>
__device__ __forceinline__ void publish_warp_max(Smem& s, float2 max, int warp, int g, int t) {
  float top = max.x, bottom = max.y;
#pragma unroll
  for (int offset = 1; offset < 4; offset *= 2) {
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    bottom = fmaxf(bottom, __shfl_xor_sync(0xffffffffu, bottom, offset));
  }
  if (t == 0) s.warp_max[warp][g] = top, s.warp_max[warp][g + 8] = bottom;
}

// What a tile's maximum does to heads g (0) and g + 8 (1): p = 2^(S - base),
// and the sums and P V so far are multiplied by rescale.
struct TileScale {
  float base[2];
  float rescale[2];
};

// The tile's maximum over the warps (in warp order) folded into the state.
template <class Smem>
__device__ __forceinline__ TileScale update_max(const Smem& s, HeadPair& state, int g) {
  TileScale r;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    float tile_max = s.warp_max[0][g + 8 * b];
#pragma unroll
    for (int w = 1; w < std::extent_v<decltype(s.warp_max)>; ++w) tile_max = fmaxf(tile_max, s.warp_max[w][g + 8 * b]);
    const float new_max = fmaxf(state.max[b], tile_max);
    r.base[b] = new_max == -INFINITY ? 0.0f : new_max;  // no key yet: every p is 0
    r.rescale[b] = exp2f(state.max[b] - r.base[b]);     // 0 while the max was -inf
    state.max[b] = new_max;
  }
  return r;
}

// P = 2^(S - base) as the A fragment of P V: FP16 with FP8 caches (V is
// FP16) in `hi`, BF16 hi + lo with BF16 caches (16 significant bits; BF16
// alone loses the accuracy bound); the sum is over what P V multiplies.
template <bool kFp8, int kTiles>
__device__ __forceinline__ void probabilities(const float (&score)[kTiles][4], const TileScale& r, HeadPair& state,
                                              uint32_t (&hi)[2 * kTiles], uint32_t (&lo)[2 * kTiles]) {
  state.sum[0] *= r.rescale[0], state.sum[1] *= r.rescale[1];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // half 0: head g, 1: head g + 8
      const float p0 = exp2f(score[j][2 * half] - r.base[half]);
      const float p1 = exp2f(score[j][2 * half + 1] - r.base[half]);
      if constexpr (kFp8) {
        const __half2 h = __floats2half2_rn(p0, p1);
        hi[2 * j + half] = *reinterpret_cast<const uint32_t*>(&h);
        const float2 f = __half22float2(h);
        state.sum[half] += f.x + f.y;
      } else {
        const float h0 = bf16_bits_to_float(float_to_bf16_bits(p0));
        const float h1 = bf16_bits_to_float(float_to_bf16_bits(p1));
        const float l0 = bf16_bits_to_float(float_to_bf16_bits(p0 - h0));
        const float l1 = bf16_bits_to_float(float_to_bf16_bits(p1 - h1));
        hi[2 * j + half] = pack_bf16(h0, h1);
        lo[2 * j + half] = pack_bf16(l0, l1);
        state.sum[half] += (h0 + l0) + (h1 + l1);
      }
    }
}

}  // namespace sparse_decode::dsa
