// The output of the packed stream kernel's 64-head form: each warpgroup
// stores its dims of its fragment's heads, normalized by the head's softmax
// sum and sink, times 2^(scale exponent), as BF16; the lse by warpgroup 0.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/output.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// Dims first_dim .. first_dim + kValues / 2 - 1 of the thread's two heads
// (o: an m64nN fragment), `exponent` theirs (kNoExponent: nothing walked);
// the lse where write_lse.
template <bool kGeneral, int kValues>
__device__ __forceinline__ void store_dims(const Smem& s, const Params& p, int64_t token, int first_head, int count,
                                           const float (&o)[kValues], int first_dim, const int (&exponent)[2],
                                           bool write_lse) {
  uint16_t* out_token = p.out + token_offset<kGeneral>(p, token, p.out_token_stride, p.out_request_stride) +
                        first_head * p.out_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = fragment_row(h);
    if (head >= count) continue;
    float* lse = write_lse && p.lse && threadIdx.x % 4 == 0
                     ? p.lse + token_offset<kGeneral>(p, token, p.lse_token_stride, p.lse_request_stride) +
                           first_head + head
                     : nullptr;
    const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + first_head + head : nullptr;
    const float scale = stream::head_output_scale<kGeneral>(HeadStats{s.running_max[head], s.running_sum[head]},
                                                            s.sink_log2[head], lse, lse_sink);
    float scale_a = 1.0f, scale_b = 1.0f;
    if (exponent[h] != kNoExponent) {
      const int e = stream::output_exponent(exponent[h]);
      scale_a = pow2(e / 2), scale_b = pow2(e - e / 2);
    }
    uint16_t* out = out_token + head * p.out_head_stride + first_dim + 2 * (threadIdx.x % 4);
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
      const float x = o[4 * j + 2 * h] * scale * scale_a * scale_b;
      const float y = o[4 * j + 2 * h + 1] * scale * scale_a * scale_b;
      *reinterpret_cast<uint32_t*>(out + 8 * j) = ptx::bf16x2_bits(x, y);
    }
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
