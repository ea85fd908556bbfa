// Request views for the tests of the DeepSeek-V4 calls (docs/spec.md,
// section 1, "Strides"): a flat [T, ...] array copied into a [B, q_len, ...]
// view whose two leading dims do not merge into one token stride, padding
// poisoned, and the flat array read back out of a view (the padding checked
// untouched).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace sparse_decode::test {

// The strides of a view of rows of `row` elements: tokens of a request
// `token_stride` apart, requests `request_stride` apart.
struct ViewStrides {
  int64_t token_stride;
  int64_t request_stride;
};

// Request-major strides that do not merge: each token row padded to
// `token_stride` (>= row), each request padded by `request_pad` (> 0)
// elements beyond its q_len rows.
inline ViewStrides padded_view(int64_t token_stride, int32_t q_len, int64_t request_pad) {
  return {token_stride, q_len * token_stride + request_pad};
}

// Token-interleaved strides ([q_len, B] storage seen as [B, q_len]): a
// request's tokens `requests * row_stride` apart, requests `row_stride`
// apart. Only read-only arguments may take them (written requests would overlap).
inline ViewStrides interleaved_view(int64_t row_stride, int64_t requests) {
  return {requests * row_stride, row_stride};
}

// The elements a view of `requests` x `q_len` rows of `row` elements spans.
inline int64_t view_extent(const ViewStrides& v, int64_t requests, int32_t q_len, int64_t row) {
  return (requests - 1) * v.request_stride + (q_len - 1) * v.token_stride + row;
}

inline int64_t view_offset(const ViewStrides& v, int64_t token, int32_t q_len) {
  return (token / q_len) * v.request_stride + (token % q_len) * v.token_stride;
}

// A flat array of `tokens` rows of `row` elements, `flat_stride` apart,
// copied into a view (every other element `fill`).
template <typename T>
std::vector<T> to_view(const T* flat, int64_t flat_stride, int64_t row, int64_t tokens, int32_t q_len,
                       const ViewStrides& v, T fill) {
  std::vector<T> view(static_cast<size_t>(view_extent(v, tokens / q_len, q_len, row)), fill);
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(&view[view_offset(v, t, q_len)], flat + t * flat_stride, row * sizeof(T));
  }
  return view;
}

// The rows of a written view as a flat array (`row` elements a token), and
// whether every element outside them still holds `fill` (bitwise).
template <typename T>
std::vector<T> from_view(const std::vector<T>& view, int64_t row, int64_t tokens, int32_t q_len, const ViewStrides& v,
                         T fill, bool* padding_untouched) {
  std::vector<T> flat(static_cast<size_t>(tokens * row));
  std::vector<uint8_t> covered(view.size(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t offset = view_offset(v, t, q_len);
    std::memcpy(&flat[t * row], &view[offset], row * sizeof(T));
    std::fill_n(&covered[offset], row, uint8_t{1});
  }
  bool untouched = true;
  for (size_t i = 0; i < view.size(); ++i) {
    if (!covered[i]) untouched &= std::memcmp(&view[i], &fill, sizeof(T)) == 0;
  }
  *padding_untouched = untouched;
  return flat;
}

}  // namespace sparse_decode::test
