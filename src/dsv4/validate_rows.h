// Checks shared by the validation of the operations on plain 512-element
// rows (sections 1 and 3): a paged pool of rows, and q/out [T, H, 512] rows.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "common/validation.h"
#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::validation {

inline int64_t element_bytes(DType dtype) { return dtype == DType::kFloat8E4M3 ? 1 : 2; }

inline Status check_pool(const char* name, const KvPool& pool, DType dtype) {
  const int64_t bytes = element_bytes(dtype);
  if (pool.data == nullptr) return invalid(name, ".data: expected a non-null pointer");
  if (!aligned16(pool.data)) return invalid(name, ".data: expected a 16-byte aligned pointer");
  if (pool.pages < 1) return invalid(name, ".pages: expected >= 1, got ", pool.pages);
  if (pool.page_size < 1) return invalid(name, ".page_size: expected >= 1, got ", pool.page_size);
  if (pool.row_stride < kHeadDim) {
    return invalid(name, ".row_stride: expected >= 512 elements, got ", pool.row_stride);
  }
  if (!multiple_of_16_bytes(pool.row_stride, bytes)) {
    return invalid(name, ".row_stride: expected a multiple of 16 bytes, got ", pool.row_stride, " elements");
  }
  const int64_t page_extent = saturating_mul(pool.page_size, pool.row_stride);
  if (pool.page_stride < page_extent) {
    return invalid(name, ".page_stride: expected >= page_size * row_stride = ", page_extent, " elements, got ",
                   pool.page_stride);
  }
  if (saturating_mul(saturating_mul(pool.pages, pool.page_stride), bytes) == std::numeric_limits<int64_t>::max()) {
    return invalid(name, ".pages: expected pages * page_stride to fit in 64-bit byte offsets, got ", pool.pages,
                   " pages of ", pool.page_stride, " elements");
  }
  if (!multiple_of_16_bytes(pool.page_stride, bytes)) {
    return invalid(name, ".page_stride: expected a multiple of 16 bytes, got ", pool.page_stride, " elements");
  }
  return Status::Ok();
}

// q is only read, so its strides may be 0 (one row broadcast); out is
// written (`written`), so its rows must not overlap.
inline Status check_rows(const char* name, const void* data, int64_t token_stride, int64_t head_stride,
                         int64_t heads, DType dtype, bool written) {
  const int64_t bytes = element_bytes(dtype);
  const std::string n = name;
  if (data == nullptr) return invalid(n, ": expected a non-null pointer");
  if (!aligned16(data)) return invalid(n, ": expected a 16-byte aligned pointer");
  if (head_stride < (written ? kHeadDim : 0) || !multiple_of_16_bytes(head_stride, bytes)) {
    return invalid(n, "_head_stride: expected ", written ? ">= 512 elements and " : "",
                   "a multiple of 16 bytes, got ", head_stride, " elements");
  }
  const int64_t row_extent = saturating_add(saturating_mul(heads - 1, head_stride), kHeadDim);
  if (token_stride < (written ? row_extent : 0) || !multiple_of_16_bytes(token_stride, bytes)) {
    return invalid(n, "_token_stride: expected ", written ? ">= (H - 1) * head_stride + 512 = " : "",
                   written ? std::to_string(row_extent) + " elements and " : std::string(),
                   "a multiple of 16 bytes, got ", token_stride, " elements");
  }
  return Status::Ok();
}

}  // namespace sparse_decode::validation
