// The per-entry rules of the expand kernel (expand.cu), host and device
// alike, so that a CPU test can run them against testing::expand_to_section1
// (tests/cpu/dsv4_hca/test_expand.cpp). docs/formats/hca_layout.md, "The GPU path".
#pragma once

#include <climits>
#include <cstdint>

#include "sparse_decode/dsv4_decode.h"  // kSwaColumns

#if defined(__CUDACC__)
#define SPARSE_DECODE_HD __host__ __device__ __forceinline__
#else
#define SPARSE_DECODE_HD inline
#endif

namespace sparse_decode::dsv4_hca {

// Threads of the expand kernel's CTA, and pivots a round of its request search.
inline constexpr int kExpandThreads = 128;

// Window columns of a token: clamp(swa_lens[t], 0, 128).
SPARSE_DECODE_HD int32_t window_columns(int32_t swa_len) {
  return swa_len < 0 ? 0 : swa_len < kSwaColumns ? swa_len : kSwaColumns;
}

// n_t: max(0, min(lens[t] - 128, hca_seq_lens[b] - 128, capacity)), for a token of a request.
SPARSE_DECODE_HD int64_t compressed_slots(int32_t lens, int32_t hca_seq_len, int64_t capacity) {
  const int64_t by_lens = int64_t{lens} - kSwaColumns, by_request = int64_t{hca_seq_len} - kSwaColumns;
  int64_t slots = by_lens < by_request ? by_lens : by_request;
  slots = slots < capacity ? slots : capacity;
  return slots > 0 ? slots : 0;
}

// Column 128 + j of a token whose table row is `table`: -1 past `slots` or
// for a negative page, else min(page * page_size + j % page_size, INT32_MAX)
// (page < 2^31, page_size <= 16384: the product fits in 64 bits). A page
// past the pool gives an index past it when the pool has at most INT32_MAX
// rows (the GPU path requires it).
SPARSE_DECODE_HD int32_t compressed_index(const int32_t* table, int32_t page_size, int64_t slots, int32_t j) {
  if (j >= slots) return -1;
  const int32_t page = table[j / page_size];
  if (page < 0) return -1;
  const int64_t index = int64_t{page} * page_size + j % page_size;
  return index < INT_MAX ? static_cast<int32_t>(index) : INT_MAX;
}

// The varlen request search narrows [lo, hi) (the largest b with cum[b] <= t
// lies in it, if any b has one) by rounds: pivots lo + i * stride for i <
// kExpandThreads, the largest pivot with cum[pivot] <= t (lo when none)
// becomes lo, lo + stride bounds hi. Stride of a round:
SPARSE_DECODE_HD int32_t search_stride(int32_t lo, int32_t hi) {
  return (hi - lo + kExpandThreads - 1) / kExpandThreads;
}

// The search's last step: request lo holds token t, else no request does.
SPARSE_DECODE_HD int32_t request_if_held(const int32_t* cum, int32_t lo, int64_t t) {
  return cum[lo] <= t && t < cum[lo + 1] ? lo : -1;
}

// The search run one pivot at a time (the kernel runs a round's pivots in
// parallel, one a thread): for the host tests.
inline int32_t request_sequential(const int32_t* cum, int32_t requests, int64_t t) {
  int32_t lo = 0, hi = requests;
  while (hi - lo > 1) {
    const int32_t stride = search_stride(lo, hi);
    int32_t found = lo;
    for (int i = 1; i < kExpandThreads; ++i) {
      const int64_t pivot = lo + int64_t{i} * stride;
      if (pivot < hi && cum[pivot] <= t && pivot > found) found = static_cast<int32_t>(pivot);
    }
    lo = found;
    hi = hi < lo + stride ? hi : lo + stride;
  }
  return request_if_held(cum, lo, t);
}

}  // namespace sparse_decode::dsv4_hca
