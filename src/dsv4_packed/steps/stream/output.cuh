// The packed stream kernel's output: a head's values normalized by its
// softmax sum and sink, times 2^(scale exponent), as BF16; its lse.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "common/ptx/convert.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::stream {

// x times `scale` and 2^e, e in two factors so that the product reaches
// below 2^-126, multiplied in this order (the 64-head form's store_dims
// multiplies its own factors in the same order).
struct OutputScale {
  float scale, a, b;
  __device__ __forceinline__ OutputScale(float s, int e) : scale(s), a(pow2(e / 2)), b(pow2(e - e / 2)) {}
  __device__ __forceinline__ float operator()(float x) const { return x * scale * a * b; }
};

// One head's values of one 16-dim half of one dim block of warp `warp`'s
// dims: v = (n-tile 0's two values of the head, n-tile 1's two), times
// `scale` and 2^e (scale tiles: e in two factors, so that it reaches below
// 2^-126), as BF16.
__device__ __forceinline__ void store_head_slice(uint16_t* out, int warp, int t, int db, int half, float4 v,
                                                 float scale, int e) {
  if (warp < Traits::kScaleTiles) {
    const OutputScale value(scale, e);
    // n-tile (half, n) column j is dim 16 half + 2j + n: this thread has dims 4t .. 4t + 3.
    *reinterpret_cast<uint2*>(out + warp * kPackedTileDims + 32 * db + 16 * half + 4 * t) =
        make_uint2(ptx::bf16x2_bits(value(v.x), value(v.z)), ptx::bf16x2_bits(value(v.y), value(v.w)));
  } else {
    // n-tile n column j is dim 16 half + 8n + j: this thread has 2t, 2t + 1 of each.
    uint16_t* dims = out + kPackedFp8Dims + 32 * db + 16 * half + 2 * t;
    *reinterpret_cast<uint32_t*>(dims) = ptx::bf16x2_bits(v.x * scale, v.y * scale);
    *reinterpret_cast<uint32_t*>(dims + 8) = ptx::bf16x2_bits(v.z * scale, v.w * scale);
  }
}

// Head h's (0: lane / 4, 1: lane / 4 + 8) values of a (dim block, 16-dim
// half) of the fragment, in store_head_slice's order.
__device__ __forceinline__ float4 head_slice(const DimFragment& acc, int db, int half, int h) {
  const float(&even)[4] = acc[db][half][0];
  const float(&odd)[4] = acc[db][half][1];
  return h == 0 ? make_float4(even[0], even[1], odd[0], odd[1]) : make_float4(even[2], even[3], odd[2], odd[3]);
}

// The factor on a head's values: 1 / (sum + its sink's weight), 0 without an
// active column; stores the head's lse (natural log, sink excluded) where
// `lse` is given, with the sink where the general form's call asks for it
// (lse_sink: the head's sink, nullptr otherwise or without sinks).
template <bool kGeneral>
__device__ __forceinline__ float head_output_scale(const HeadStats& stats, float sink_log2, float* lse,
                                                   const float* lse_sink) {
  const bool none = stats.max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  if constexpr (kGeneral) {
    if (lse && lse_sink) {
      *lse = lse_with_sink(stats.max, stats.sum, sink_log2, *lse_sink);
      lse = nullptr;
    }
  }
  if (lse) *lse = none ? -INFINITY : (stats.max + __log2f(stats.sum)) * kLn2;
  return none ? 0.0f : 1.0f / (stats.sum + ptx::exp2_approx(sink_log2 - stats.max));
}

// The scale exponent a head's values are stored with (2^e), clamped where
// the BF16 output is 0 anyway.
__device__ __forceinline__ int output_exponent(int exponent) { return exponent < -300 ? -300 : exponent; }

// Warp `warp`'s dims of its heads h_begin .. h_end - 1 (0: lane / 4, 1: lane /
// 4 + 8; stats[h] theirs), over the softmax sum and the sink (sink_log2(head)),
// as BF16; lse from warp 0.
template <bool kGeneral, class SinkLog2>
__device__ __forceinline__ void store_warp_output(const Params& p, int64_t token, int first_head, int count,
                                                  int warp, const DimFragment& acc, const int (&exponent)[2],
                                                  const HeadStats (&stats)[2], int h_begin, int h_end,
                                                  SinkLog2&& sink_log2) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  uint16_t* out_token = p.out + token_offset<kGeneral>(p, token, p.out_token_stride, p.out_request_stride) +
                        first_head * p.out_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = g + 8 * h;
    if (h < h_begin || h >= h_end || head >= count) continue;  // H = 8: the padded rows
    float* lse = p.lse && warp == 0 && t == 0
                     ? p.lse + token_offset<kGeneral>(p, token, p.lse_token_stride, p.lse_request_stride) +
                           first_head + head
                     : nullptr;
    const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + first_head + head : nullptr;
    const float scale = head_output_scale<kGeneral>(stats[h], sink_log2(head), lse, lse_sink);
    uint16_t* out = out_token + head * p.out_head_stride;
#pragma unroll
    for (int db = 0; db < 2; ++db)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        store_head_slice(out, warp, t, db, half, head_slice(acc, db, half, h), scale, output_exponent(exponent[h]));
      }
  }
}

// This warp's dims, the sinks from shared memory (store_warp_output).
template <bool kGeneral>
__device__ __forceinline__ void store_output(const Smem& s, const Params& p, int64_t token, int first_head,
                                             int count, const DimFragment& acc, const int (&exponent)[2],
                                             const HeadStats (&stats)[2], int h_begin, int h_end) {
  store_warp_output<kGeneral>(p, token, first_head, count, static_cast<int>(threadIdx.x / 32), acc, exponent, stats,
                              h_begin, h_end, [&](int head) { return s.sink_log2[head]; });
}

}  // namespace sparse_decode::dsv4_packed::stream
