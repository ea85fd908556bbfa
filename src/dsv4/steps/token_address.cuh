// Where a token's row of q, indices, lens, out and lse starts (and in the
// page walk, of swa_rows, swa_lens, block_table and lens). The plain form
// of a kernel reads flat arguments (token t at t * token stride, lens at
// stride 1); the general form (Traits::kGeneral) reads [B, q_len] request
// views: request t / q_len, index t % q_len (params.h).
#pragma once

#include <cstdint>

#include "common/math.cuh"
#include "dsv4/params.h"

namespace sparse_decode::dsv4 {

// Token `token`'s offset in an argument of token stride `token_stride` and
// request stride `request_stride` (the general form's; the plain form
// ignores it): request_view_offset, tokens below 2^31 (the grid).
template <class Traits>
__device__ __forceinline__ int64_t token_offset(const Dsv4Params& p, int64_t token, int64_t token_stride,
                                                int64_t request_stride) {
  if constexpr (Traits::kGeneral) {
    return request_view_offset(p.request_tokens, token, token_stride, request_stride);
  } else {
    return token * token_stride;
  }
}

// Token `token`'s element of lens.
template <class Traits>
__device__ __forceinline__ int64_t lens_offset(const Dsv4Params& p, int64_t token) {
  if constexpr (Traits::kGeneral) {
    return token_offset<Traits>(p, token, p.lens_token_stride, p.lens_request_stride);
  } else {
    return token;
  }
}

}  // namespace sparse_decode::dsv4
