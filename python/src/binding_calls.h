// What the decode bindings share beyond arrays (binding.h): the request
// mapping (seq_lens, cum_seq_lens_q, q_len), the workspace, q and out, and
// running a call with its Status raised as a Python exception.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "binding.h"

namespace sparse_decode::binding {

// The length of a per-request array (seq_lens, hca_seq_lens) against the
// tokens: B = cum_seq_lens_q's offsets - 1, T / q_len for a given q_len, the
// first dim of a [B, q_len, ...] query, or a divisor of T (uniform q_len).
inline void check_request_count(const Array& a, const std::optional<Array>& cum, std::optional<int32_t> q_len,
                                int32_t q_dim_len, int64_t tokens) {
  const int64_t count = a.count();
  const std::string got = ", got shape " + a.shape_text();
  if (cum) {
    if (count != cum->count() - 1) {
      fail(std::string(a.name) + ": expected B = " + std::to_string(cum->count() - 1) +
           " elements, one per request of cum_seq_lens_q (B + 1 = " + std::to_string(cum->count()) + " offsets)" + got);
    }
    return;
  }
  if (tokens == 0) return;
  const int64_t per = q_len ? *q_len : q_dim_len;
  if (per > 0) {
    if (tokens % per == 0 && count != tokens / per) {
      fail(std::string(a.name) + ": expected B = T / q_len = " + std::to_string(tokens / per) + " elements (T = " +
           std::to_string(tokens) + " query tokens, q_len = " + std::to_string(per) +
           (q_len ? ")" : " from the [B, q_len, ...] query)") + got);
    }
    return;
  }
  if (!q_len && (count == 0 || tokens % count != 0)) {
    fail(std::string(a.name) + ": expected B elements with B dividing the T = " + std::to_string(tokens) +
         " query tokens (uniform q_len = T / B; cum_seq_lens_q gives varlen requests)" + got);
  }
}

// cum_seq_lens_q in host memory: offsets >= 0, non-decreasing, each request
// at most max_q_len tokens, the last offset at most T (tokens outside
// [cum[0], cum[B]) belong to no request), as the library's own check.
// Device offsets are not read: no host synchronization.
inline void check_offsets(const Array& cum, int32_t max_q_len, int64_t tokens) {
  const auto* offsets = static_cast<const int32_t*>(cum.data);
  const int64_t n = cum.count();
  bool ok = offsets[0] >= 0 && offsets[n - 1] <= tokens;
  for (int64_t b = 0; ok && b + 1 < n; ++b) {
    const int64_t step = int64_t{offsets[b + 1]} - offsets[b];
    ok = step >= 0 && (max_q_len <= 0 || step <= max_q_len);
  }
  if (ok) return;
  std::string values = "[";
  for (int64_t b = 0; b < std::min<int64_t>(n, 9); ++b) values += (b ? ", " : "") + std::to_string(offsets[b]);
  values += n > 9 ? ", ...]" : "]";
  fail("cum_seq_lens_q: expected offsets >= 0, non-decreasing, each step <= max_q_len = " +
       std::to_string(max_q_len) + ", the last <= T = " + std::to_string(tokens) + ", got " + values);
}

// The request mapping of the DeepSeek-V4 calls: `per_request` (int32 [B]:
// seq_lens, hca_seq_lens) gives B, cum_seq_lens_q [B + 1] the varlen
// offsets. Query lengths are given, else read off a [B, q_len, ...] array
// (q_dim_len; 0 for a flat one, which with uniform requests divides T by B).
// A per-request array whose length contradicts the tokens is refused here,
// by its name; whatever stays 0 is refused by the library with its name.
template <typename Args>
const int32_t* set_requests(Args& args, const std::optional<Array>& per_request, const std::optional<Array>& cum,
                            std::optional<int32_t> q_len, std::optional<int32_t> max_q_len, int32_t q_dim_len) {
  const int32_t* data = nullptr;
  if (cum) {
    args.cum_seq_lens_q = vector_of<int32_t>(*cum, Kind::kInt32, "int32 [B + 1]", -1);
    if (cum->count() < 2) fail("cum_seq_lens_q: expected B + 1 >= 2 offsets, got shape " + cum->shape_text());
    args.num_requests = static_cast<int32_t>(cum->count() - 1);
  }
  if (per_request) {
    data = vector_of<int32_t>(*per_request, Kind::kInt32, "int32", -1);
    if (!cum) args.num_requests = static_cast<int32_t>(per_request->count());
    check_request_count(*per_request, cum, q_len, q_dim_len, args.num_tokens);
  }
  args.max_q_len = max_q_len.value_or(q_dim_len);
  args.q_len = q_len.value_or(q_dim_len);
  if (!q_len && q_dim_len == 0 && args.num_requests > 0 && args.num_tokens % args.num_requests == 0) {
    args.q_len = static_cast<int32_t>(args.num_tokens / args.num_requests);
  }
  // [B, q_len, ...] arguments without per-request arrays: B from the
  // tokens, which request views need.
  if (!cum && !per_request && args.q_len > 0 && args.num_tokens % args.q_len == 0) {
    args.num_requests = static_cast<int32_t>(args.num_tokens / args.q_len);
  }
  if (cum && args.memory == MemorySpace::kHost) check_offsets(*cum, args.max_q_len, args.num_tokens);
  return data;
}

// Scratch memory: (pointer, bytes) of an optional contiguous array of any
// dtype (the library writes `bytes` contiguous bytes from the pointer).
inline std::pair<void*, size_t> workspace_of(const std::optional<Array>& a) {
  if (!a) return {nullptr, 0};
  const Merged all = merge_leading(*a, a->ndim(), 1);
  if (all.size > 1 && all.stride != 1) {
    fail("workspace: expected a contiguous array, got shape " + a->shape_text() + " with element stride " +
         std::to_string(all.stride));
  }
  return {a->data, static_cast<size_t>(a->count()) * ((a->dtype.bits + 7) / 8)};
}

// Heads come from q's second-to-last dim; q and out are read as [T, H, 512]
// or [B, q_len, H, 512], any token and head strides, request views in place.
template <typename Args>
void set_query_and_output(Args& args, const Array& q, const Array& out) {
  if (q.ndim() != 3 && q.ndim() != 4) fail("q: expected [T, H, 512] or [B, q_len, H, 512], got " + q.shape_text());
  args.num_heads = static_cast<int32_t>(q.shape[q.ndim() - 2]);
  const Rows q_rows = rows_of(q, args.num_heads, kHeadDim, true);
  const Rows out_rows = rows_of(out, args.num_heads, kHeadDim, true);
  args.num_tokens = q_rows.tokens;
  if (out_rows.tokens != args.num_tokens) {
    fail("out: expected " + std::to_string(args.num_tokens) + " tokens like q, got shape " + out.shape_text());
  }
  args.q = q.data;
  args.q_token_stride = q_rows.token_stride;
  args.q_head_stride = q_rows.head_stride;
  args.q_request_stride = q_rows.request_stride;
  args.out = out.data;
  args.out_token_stride = out_rows.token_stride;
  args.out_head_stride = out_rows.head_stride;
  args.out_request_stride = out_rows.request_stride;
}

// The [B, q_len, ...] length of a per-token array whose flat form has
// flat_ndim dims (q: 3, an index table: 2), 0 for a flat one.
inline int32_t q_dim_len_of(const Array& a, size_t flat_ndim) {
  return a.ndim() == flat_ndim + 1 ? static_cast<int32_t>(a.shape[1]) : 0;
}

// q_len as the arrays give it: q's [B, q_len, H, 512] shape, else a
// [B, q_len, W] index table's (a flat q with a request-view table).
inline int32_t q_dim_len_of(const Array& q, const std::optional<Array>& indices) {
  const int32_t from_q = q_dim_len_of(q, 3);
  return from_q != 0 || !indices ? from_q : q_dim_len_of(*indices, 2);
}

// The sink term (types.h): 0 kInOutput, 1 kInOutputAndLse, 2 kNone; the
// library refuses other values.
inline SinkTerm sink_term_of(int32_t value) { return static_cast<SinkTerm>(value); }

// What the DeepSeek-V4 calls share after their inputs: the optional lse
// (float32 [tokens..., H]) and out-of-range counter (int32 [1]), and PDL.
template <typename Args>
void set_lse_count_and_pdl(Args& args, const std::optional<Array>& lse, const std::optional<Array>& count,
                           bool enable_pdl) {
  if (lse) {
    const Lse rows = lse_of(*lse, args.num_tokens, args.num_heads);
    args.lse = rows.data;
    args.lse_token_stride = rows.token_stride;
    args.lse_request_stride = rows.request_stride;
  }
  if (count) {
    args.out_of_range_count = const_cast<int32_t*>(vector_of<int32_t>(*count, Kind::kInt32, "int32 [1]", 1));
  }
  args.enable_pdl = enable_pdl;
}

// Runs `decode(args, workspace, bytes, stream)` without the GIL (the CPU
// backend can run for a while; other Python threads may go on) and raises on
// a refusal. The library checks the workspace size itself, after the other
// arguments, so a bad argument is named before a workspace sized for it.
template <typename Args, typename Decode>
void run_decode(const Args& args, const std::optional<Array>& workspace, uintptr_t stream, Decode decode) {
  const auto [workspace_data, workspace_bytes] = workspace_of(workspace);
  Status status;
  {
    nb::gil_scoped_release release;
    status = decode(args, workspace_data, workspace_bytes, reinterpret_cast<CUstream_st*>(stream));
  }
  check(status);
}

}  // namespace sparse_decode::binding
