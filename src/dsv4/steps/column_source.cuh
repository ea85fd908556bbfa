// Where a token's column indices come from: the one place the kernels turn a
// column into the index of its row. The plain and general forms read the
// index table, indices[t, c]. The page-walk form (Traits::kPageWalk,
// dsv4_decode_hca) reads window column c < 128 from swa_rows[t, c] and
// compressed column 128 + j from its page, block_table[t, j / page_size]:
// row page * page_size + j % page_size (docs/formats/hca_layout.md, "The GPU
// path"), the index that the expansion into a section-1 table gives, with no
// table in memory. Reading a column is two steps: the entry's load
// (load_entry, or a cp.async into shared memory), and its index
// (entry_index) where the row is copied.
#pragma once

#include <cstdint>

#include "common/math.cuh"
#include "dsv4/params.h"
#include "dsv4/steps/token_address.cuh"
#include "dsv4_hca/expand_rules.h"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4 {

// Whether column `column` of a token has an entry to read; its index is -1 where not.
template <class Traits>
__device__ __forceinline__ bool column_has_entry(const Dsv4Params& p, int column) {
  if constexpr (Traits::kPageWalk) {
    return column < p.pages.columns;
  } else {
    return column < p.width;
  }
}

// The address of column `column`'s entry (a column with an entry, or column 0).
template <class Traits>
__device__ __forceinline__ const int32_t* column_entry(const Dsv4Params& p, int64_t token, int column) {
  if constexpr (Traits::kPageWalk) {
    if (column < kSwaColumns) {
      return p.pages.swa_rows +
             token_offset<Traits>(p, token, p.pages.swa_rows_stride, p.pages.swa_rows_request_stride) + column;
    }
    const uint32_t page = divide(p.pages.page_size, static_cast<uint32_t>(column - kSwaColumns));
    return p.pages.block_table +
           token_offset<Traits>(p, token, p.pages.block_table_stride, p.pages.block_table_request_stride) + page;
  } else {
    return &p.indices[token_offset<Traits>(p, token, p.indices_stride, p.indices_request_stride) + column];
  }
}

// Column `column`'s index from its entry: the entry itself, or in the page
// walk a compressed column's row in its page (dsv4_hca::page_row: -1 for a
// negative page, an index past the pool for a page past it).
template <class Traits>
__device__ __forceinline__ int32_t entry_index(const Dsv4Params& p, int column, int32_t entry) {
  if constexpr (Traits::kPageWalk) {
    if (column < kSwaColumns) return entry;
    const uint32_t j = static_cast<uint32_t>(column - kSwaColumns);
    const uint32_t page_size = p.pages.page_size.divisor;
    const uint32_t slot = j - divide(p.pages.page_size, j) * page_size;
    return dsv4_hca::page_row(entry, static_cast<int32_t>(page_size), static_cast<int32_t>(slot));
  } else {
    return entry;
  }
}

// The token's entry at `column`, from global memory (-1 without one; its
// index is -1 too). The page walk turns it into an index only where the
// row is copied (copy_rows): a conversion beside the load would stall the
// thread on it before the token's other loads issue (one DRAM trip more).
template <class Traits>
__device__ __forceinline__ int32_t load_entry(const Dsv4Params& p, int64_t token, int column) {
  return column_has_entry<Traits>(p, column) ? *column_entry<Traits>(p, token, column) : -1;
}

}  // namespace sparse_decode::dsv4
