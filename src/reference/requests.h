// Which request a query token belongs to, from a uniform q_len or from
// cum_seq_lens_q: shared by the references so that every operation maps
// tokens to requests the same way.
#pragma once

#include <cstdint>

namespace sparse_decode::reference {

struct TokenRequest {
  int32_t request = -1;  // -1: no request holds the token (varlen offsets that do not cover it)
  int64_t index = 0;     // position of the token among its request's query tokens
  int64_t q_len = 0;     // query tokens of that request
};

// With cum_seq_lens_q, the first request b with cum[b] <= token < cum[b + 1];
// else request token / q_len when it is < num_requests.
inline TokenRequest locate_token(int64_t token, int32_t num_requests, const int32_t* cum_seq_lens_q,
                                 int32_t q_len) {
  TokenRequest found;
  if (cum_seq_lens_q) {
    for (int32_t b = 0; b < num_requests; ++b) {
      const int64_t begin = cum_seq_lens_q[b];
      const int64_t end = cum_seq_lens_q[b + 1];
      if (token >= begin && token < end) return {b, token - begin, end - begin};
    }
    return found;
  }
  const int64_t request = token / q_len;
  if (request >= num_requests) return found;
  return {static_cast<int32_t>(request), token % q_len, q_len};
}

// Where token `token`'s row of a [T, ...] argument starts, in elements: t *
// token_stride for a flat argument (request_stride 0), else request b = t /
// q_len, index i = t % q_len at b * request_stride + i * token_stride (a
// [B, q_len, ...] request view; docs/spec.md, section 1, "Strides").
inline int64_t token_offset(int64_t token, int64_t token_stride, int64_t request_stride, int32_t q_len) {
  if (request_stride == 0) return token * token_stride;
  return (token / q_len) * request_stride + (token % q_len) * token_stride;
}

}  // namespace sparse_decode::reference
