// The GPU path of dsv4_decode_hca (SPEC section 3) runs section 1's kernels
// in their page-walk form on the rows of the expansion into a section-1
// table [T, W'] (docs/formats/hca_layout.md, "The GPU path"): their chunk
// plan is W''s, their columns come from the HCA metadata. This header is the
// expansion's width; expand_rules.h its per-entry rules.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode.h"  // kSwaColumns

namespace sparse_decode::dsv4_hca {

// Section 1's widest table: 128 window columns + 16384 compressed ones.
inline constexpr int64_t kMaxCompressedColumns = 16384;

// Width W' of the expansion: 128 + max_pages * page_size rounded up to a
// multiple of 4 (testing::expand_to_section1's), or 0 when it exceeds
// section 1's 128 + 16384 (or page_size < 1).
inline int32_t expanded_width(int32_t max_pages, int64_t page_size) {
  if (max_pages < 1 || page_size < 1 || page_size > kMaxCompressedColumns ||
      int64_t{max_pages} * page_size > kMaxCompressedColumns) {
    return 0;
  }
  return static_cast<int32_t>((kSwaColumns + int64_t{max_pages} * page_size + 3) / 4 * 4);
}

}  // namespace sparse_decode::dsv4_hca
