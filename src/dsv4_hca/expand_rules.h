// The per-entry rules of the expansion into a section-1 table, host and
// device alike: the kernels' page walk (dsv4/steps/column_source.cuh,
// token_scope.cuh) computes each column by them, and a CPU test runs them
// against testing::expand_to_section1 (tests/cpu/dsv4_hca/test_expand.cpp).
// docs/formats/hca_layout.md, "The GPU path".
#pragma once

#include <climits>
#include <cstdint>

#include "common/host_device.h"
#include "sparse_decode/dsv4_decode.h"  // kSwaColumns

namespace sparse_decode::dsv4_hca {

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

// The row of slot `slot` (< page_size) of page `page`: -1 for a negative
// page, else min(page * page_size + slot, INT32_MAX) (page < 2^31,
// page_size <= 16384: the product fits in 64 bits). A page past the pool
// gives an index past it when the pool has at most INT32_MAX rows (the GPU
// path requires it), so that the kernels mask and count it.
SPARSE_DECODE_HD int32_t page_row(int32_t page, int32_t page_size, int32_t slot) {
  if (page < 0) return -1;
  const int64_t index = int64_t{page} * page_size + slot;
  return index < INT_MAX ? static_cast<int32_t>(index) : INT_MAX;
}

}  // namespace sparse_decode::dsv4_hca
