// Where a token's rows of q, the segments' indices and lens, out and lse
// start, and its SWA window. The plain form of a kernel (kGeneral false)
// reads flat arguments with lens at stride 1 and no window; the general
// form reads [B, q_len] request views and applies the seq_lens window
// (params.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "dsv4_packed/params.h"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4_packed {

// Token `token`'s offset in an argument of token stride `token_stride` and
// request stride `request_stride` (the general form's; the plain form
// ignores it): request_view_offset, tokens below 2^31 (the grid).
template <bool kGeneral>
__device__ __forceinline__ int64_t token_offset(const Params& p, int64_t token, int64_t token_stride,
                                                int64_t request_stride) {
  if constexpr (kGeneral) {
    return request_view_offset(p.request_tokens, token, token_stride, request_stride);
  } else {
    return token * token_stride;
  }
}

// Token `token`'s index row of segment `seg` (an offset in seg.indices) in
// the general form (`views`: the segment's).
template <bool kGeneral>
__device__ __forceinline__ int64_t indices_offset(const Params& p, const SegmentParams& seg,
                                                  const SegmentViews& views, int64_t token) {
  return token_offset<kGeneral>(p, token, seg.indices_stride, views.indices_request_stride);
}

// Token `token`'s len of segment `seg` in the general form (its lens given),
// else `width`.
template <bool kGeneral>
__device__ __forceinline__ int segment_len(const Params& p, const SegmentParams& seg, const SegmentViews& views,
                                           int64_t token, int width) {
  if (!seg.lens) return width;
  return seg.lens[token_offset<kGeneral>(p, token, views.lens_token_stride, views.lens_request_stride)];
}

// The request whose query range holds `token` (cum_seq_lens_q
// non-decreasing), or -1: a 32-ary search by the calling warp (every lane
// calls it and gets the same value), one L2 round trip a round (two rounds
// up to 1024 requests), without a barrier.
__device__ __forceinline__ int32_t warp_request_of(const int32_t* cum, int32_t requests, int64_t token) {
  const int lane = threadIdx.x % 32;
  int32_t lo = 0, hi = requests;  // the largest b with cum[b] <= token lies in [lo, hi), if any b has one
  while (hi - lo > 1) {
    const int32_t stride = (hi - lo + 31) / 32;
    const int64_t pivot = lo + int64_t{lane} * stride;
    const bool below = pivot < hi && cum[pivot] <= token;
    const uint32_t ballot = __ballot_sync(0xffffffffu, below);
    // No pivot at or below the token (cum[lo] > token): lo stays, and the last check fails.
    const int last = ballot ? 31 - __clz(ballot) : 0;
    lo += last * stride;
    hi = min(hi, lo + stride);
  }
  return cum[lo] <= token && token < cum[lo + 1] ? lo : -1;
}

// The SWA columns c < 128 that the seq_lens window leaves active for
// `token`: min(128, max(0, p + 1)), p = seq_lens[b] - q_len_b + (index of
// the token in request b); 0 for a token that no request holds; 128 without
// seq_lens. Called by whole warps (the varlen search).
__device__ __forceinline__ int swa_window(const Params& p, int64_t token) {
  if (!p.seq_lens) return kSwaColumns;
  int64_t position;
  if (!p.cum_seq_lens_q) {
    const int64_t request = token / p.q_len;
    position = int64_t{p.seq_lens[request]} - p.q_len + (token - request * p.q_len);
  } else {
    const int32_t b = warp_request_of(p.cum_seq_lens_q, p.num_requests, token);
    if (b < 0) return 0;
    const int64_t begin = p.cum_seq_lens_q[b], end = p.cum_seq_lens_q[b + 1];
    position = int64_t{p.seq_lens[b]} - (end - begin) + (token - begin);
  }
  return static_cast<int>(position < 0 ? 0 : position + 1 < kSwaColumns ? position + 1 : kSwaColumns);
}

// The natural-log lse with the sink term (SinkTerm::kInOutputAndLse) from a
// head's softmax statistics (max in the log2 domain, -inf without an active
// column; sum relative to it) and its sink (log2 domain, and `sink` as
// given); the plain lse without a sink. The sink alone (no active column, a
// sink of +inf, or one whose log2 form overflows: sink > FLT_MAX / log2(e),
// where it outweighs every score) is returned as given.
__device__ __forceinline__ float lse_with_sink(float max, float sum, float sink_log2, float sink) {
  if (sink_log2 == -INFINITY) return max == -INFINITY ? -INFINITY : (max + __log2f(sum)) * kLn2;
  if (max == -INFINITY || sink_log2 == INFINITY) return sink;
  const float joint = fmaxf(max, sink_log2);
  return (joint + __log2f(__fmaf_rn(sum, ptx::exp2_approx(max - joint), ptx::exp2_approx(sink_log2 - joint)))) * kLn2;
}

// Whether SWA-segment column `column` is inside the window (columns from 128 on always are).
__device__ __forceinline__ bool in_window(int column, int window) { return column >= kSwaColumns || column < window; }

}  // namespace sparse_decode::dsv4_packed
