// Checks that the DeepSeek-V4 calls (sections 1, 2 and 3) share beyond the
// rows: the request mapping (uniform q_len or cum_seq_lens_q), request views
// ([B, q_len, ...] arguments with a request stride), the sink term, and the
// request metadata of host-memory calls, which the host can read.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "common/validation.h"
#include "sparse_decode/types.h"

namespace sparse_decode::validation {

// The requests of a call, as its arguments give them.
struct Requests {
  int64_t tokens;
  int32_t num_requests;
  const int32_t* cum_seq_lens_q;
  int32_t q_len;
  int32_t max_q_len;
};

// The request mapping that seq_lens needs (sections 1 and 2): B >= 1, and a
// uniform q_len with T = B * q_len, or cum_seq_lens_q with max_q_len and T
// <= B * max_q_len. Any query length >= 1 is served.
inline Status check_request_mapping(const Requests& r, const char* needed_by) {
  if (r.num_requests < 1) return invalid("num_requests: expected >= 1 with ", needed_by, ", got ", r.num_requests);
  if (r.cum_seq_lens_q) {
    if (r.max_q_len < 1) return invalid("max_q_len: expected >= 1 with cum_seq_lens_q, got ", r.max_q_len);
    if (r.tokens > int64_t{r.num_requests} * r.max_q_len) {
      return invalid("num_tokens: expected <= num_requests * max_q_len = ", int64_t{r.num_requests} * r.max_q_len,
                     ", got ", r.tokens);
    }
    return Status::Ok();
  }
  if (r.q_len < 1) return invalid("q_len: expected >= 1 with ", needed_by, " and no cum_seq_lens_q, got ", r.q_len);
  if (r.tokens != int64_t{r.num_requests} * r.q_len) {
    return invalid("num_tokens: expected num_requests * q_len = ", int64_t{r.num_requests} * r.q_len, ", got ",
                   r.tokens);
  }
  return Status::Ok();
}

// Host memory: the host reads cum_seq_lens_q, so its values must be request
// offsets in order, 0 <= cum[0] <= ... <= cum[B] <= num_tokens (tokens
// outside [cum[0], cum[B]) belong to no request), and max_q_len at least
// each request's length. Device memory: not read (no host read of device data).
inline Status check_host_cum_seq_lens_q(MemorySpace memory, const Requests& r) {
  if (memory != MemorySpace::kHost || r.cum_seq_lens_q == nullptr || r.num_requests < 1) return Status::Ok();
  const int32_t* cum = r.cum_seq_lens_q;
  if (cum[0] < 0 || cum[0] > r.tokens) {
    return invalid("cum_seq_lens_q: expected offsets in [0, num_tokens = ", r.tokens, "], got cum_seq_lens_q[0] = ",
                   cum[0]);
  }
  int32_t longest = 0;
  for (int32_t b = 0; b < r.num_requests; ++b) {
    if (cum[b + 1] < cum[b] || cum[b + 1] > r.tokens) {
      return invalid("cum_seq_lens_q: expected non-decreasing offsets in [0, num_tokens = ", r.tokens,
                     "], got cum_seq_lens_q[", b + 1, "] = ", cum[b + 1], " after cum_seq_lens_q[", b, "] = ", cum[b]);
    }
    longest = cum[b + 1] - cum[b] > longest ? cum[b + 1] - cum[b] : longest;
  }
  if (r.max_q_len < longest) {
    return invalid("max_q_len: expected >= the longest query length in cum_seq_lens_q = ", longest, ", got ",
                   r.max_q_len);
  }
  return Status::Ok();
}

// One argument's request view: its request stride, the token stride it
// goes with, the multiple the request stride must be of (16 bytes of the
// element type for rows read 16 bytes at a time), and for a written
// argument the extent of one token's row (the requests may not overlap).
struct RequestView {
  const char* name;             // the argument: "q", "indices", "swa.lens", ...
  const char* token_stride_name;
  int64_t request_stride;
  int64_t token_stride;
  int64_t multiple = 1;
  int64_t written_extent = 0;   // 0: the argument is only read
};

// The token stride of the flat layout that a view equals, or -1 when it is
// none: a request stride of 0 (flat already), q_len = 1 (tokens are then
// request_stride apart), or request_stride = q_len * token_stride (the two
// leading dims merge).
inline int64_t flat_token_stride(int64_t request_stride, int64_t token_stride, int32_t q_len) {
  if (request_stride == 0) return token_stride;
  if (q_len == 1) return request_stride;
  if (saturating_mul(q_len, token_stride) == request_stride) return token_stride;
  return -1;
}

// How the kernels address one argument's tokens: token t at (t /
// request_tokens) * request_stride + (t % request_tokens) * token_stride.
struct TokenStrides {
  int64_t token_stride, request_stride;
};

// One argument of a call as the caller gives it, and where its TokenStrides go.
struct ViewArgument {
  TokenStrides* resolved;
  int64_t token_stride, request_stride;
  bool given;  // false: the array is absent (its strides are not read)
};

// The launchers' reading of a call's arguments: request_tokens is q_len when
// a given argument is a view that does not merge into one token stride, else
// 1 (so request_tokens != 1 exactly when a view is read); each argument that merges gets its flat token stride (and the request
// stride that equals it), the others keep theirs.
inline uint32_t resolve_token_strides(std::initializer_list<ViewArgument> arguments, int32_t q_len) {
  bool any_view = false;
  for (const ViewArgument& a : arguments) {
    any_view |= a.given && flat_token_stride(a.request_stride, a.token_stride, q_len) < 0;
  }
  const uint32_t request_tokens = any_view ? static_cast<uint32_t>(q_len) : 1u;
  for (const ViewArgument& a : arguments) {
    const int64_t flat = a.given ? flat_token_stride(a.request_stride, a.token_stride, q_len) : a.token_stride;
    *a.resolved = flat >= 0 ? TokenStrides{flat, flat * request_tokens} : TokenStrides{a.token_stride, a.request_stride};
  }
  return request_tokens;
}

// The request views of a call: each request stride >= 0 and of its
// multiple; with any nonzero one, a uniform q_len >= 1 and num_requests with
// num_tokens = num_requests * q_len (cum_seq_lens_q null), offsets that fit
// in 64 bits, and written requests that do not overlap: request_stride >=
// (q_len - 1) * token_stride + the row's extent.
inline Status check_request_views(const Requests& r, std::initializer_list<RequestView> views) {
  const RequestView* first = nullptr;
  for (const RequestView& v : views) {
    if (v.request_stride < 0) return invalid(v.name, "_request_stride: expected >= 0, got ", v.request_stride);
    if (v.request_stride % v.multiple != 0) {
      return invalid(v.name, "_request_stride: expected a multiple of ", v.multiple, " elements, got ",
                     v.request_stride);
    }
    if (v.request_stride != 0 && first == nullptr) first = &v;
  }
  if (first == nullptr) return Status::Ok();
  const std::string with = std::string(" with a request stride (") + first->name +
                           "_request_stride = " + std::to_string(first->request_stride) + ")";
  if (r.cum_seq_lens_q) {
    return invalid("cum_seq_lens_q: expected null", with, ": [B, q_len, ...] views have a uniform q_len");
  }
  if (r.q_len < 1) return invalid("q_len: expected >= 1", with, ", got ", r.q_len);
  if (r.num_requests < 1) return invalid("num_requests: expected >= 1", with, ", got ", r.num_requests);
  if (r.tokens != int64_t{r.num_requests} * r.q_len) {
    return invalid("num_tokens: expected num_requests * q_len = ", int64_t{r.num_requests} * r.q_len, with,
                   ", got ", r.tokens);
  }
  for (const RequestView& v : views) {
    if (v.request_stride == 0) continue;
    if (saturating_mul(r.num_requests - 1, v.request_stride) == std::numeric_limits<int64_t>::max()) {
      return invalid(v.name, "_request_stride: expected (num_requests - 1) * ", v.name,
                     "_request_stride to fit in 64-bit offsets, got ", v.request_stride);
    }
    if (v.written_extent > 0) {
      const int64_t extent = saturating_add(saturating_mul(r.q_len - 1, v.token_stride), v.written_extent);
      if (v.request_stride < extent) {
        return invalid(v.name, "_request_stride: expected >= (q_len - 1) * ", v.token_stride_name, " + ",
                       v.written_extent, " = ", extent, " elements (requests may not overlap), got ",
                       v.request_stride);
      }
    }
  }
  return Status::Ok();
}

inline Status check_sink_term(SinkTerm sink_term) {
  if (sink_term != SinkTerm::kInOutput && sink_term != SinkTerm::kInOutputAndLse && sink_term != SinkTerm::kNone) {
    return invalid("sink_term: expected kInOutput, kInOutputAndLse or kNone, got ", static_cast<int>(sink_term));
  }
  return Status::Ok();
}

// lens_token_stride: any value >= 0 (0: one value for every token).
inline Status check_lens_token_stride(const char* name, int64_t stride) {
  if (stride < 0) return invalid(name, ": expected >= 0, got ", stride);
  return Status::Ok();
}

}  // namespace sparse_decode::validation
