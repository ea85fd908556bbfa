// The data of a case: query rows and pools of plain 512-element rows, laid
// out in the arena with random strides and gaps. Every byte that no active
// column reads holds NaN (rows, row padding, page gaps, q's gaps), so a
// kernel that reads one shows it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz.h"
#include "sparse_decode/types.h"

namespace sparse_decode::fuzz {

inline int element_bytes(DType dtype) { return dtype == DType::kFloat8E4M3 ? 1 : 2; }

// Rows are cut from fixed tables of pre-drawn values at random offsets:
// drawing and rounding each element costs more than the reference.
enum class Table { kNormalFp8, kNormalBf16, kWideFp8 };  // N(0, 1) as E4M3 / BF16 bits; N(0, 1) * 110 as E4M3
// Copies `count` elements of `table` from a random offset to `bytes`.
void copy_from_table(Rng& rng, Table table, uint8_t* bytes, int count);
// Writes `value` rounded to `dtype` at `bytes`.
void put_element(DType dtype, double value, uint8_t* bytes);
// Writes NaN of `dtype` over `count` elements from `bytes`.
void put_nan(DType dtype, uint8_t* bytes, int64_t count);

// A pool of plain rows in the arena.
struct PlainPool {
  size_t region = kNoRegion;
  int64_t pages = 0, page_size = 1, row_stride = 512, page_stride = 512;  // elements
  static constexpr size_t kNoRegion = static_cast<size_t>(-1);
  int64_t rows() const { return pages * page_size; }
  int64_t row_offset(int64_t row) const { return (row / page_size) * page_stride + (row % page_size) * row_stride; }
  // The pool's KvPool over an arena mirrored at `base` (empty when absent).
  KvPool at(const Arena& arena, uint8_t* base) const;
};

// Adds a pool of at most about `max_rows` rows (random page size, strides, gaps).
PlainPool add_plain_pool(Arena& arena, Rng& rng, const std::string& name, DType dtype, int64_t max_rows);
// Random N(0, 1) rows where `live[row]`, NaN everywhere else in the pool.
void fill_plain_pool(Arena& arena, const PlainPool& pool, DType dtype, Rng& rng, const std::vector<bool>& live);

// q [T, H, 512] with random strides (gaps NaN).
struct QueryRows {
  size_t region = 0;
  int64_t token_stride = 0, head_stride = 0;  // elements
};
QueryRows add_query(Arena& arena, Rng& rng, DType dtype, int64_t tokens, int heads, int dims, int stride_unit);
// N(0, 1) values, or (`one_hot`) one value `peak` at a dim of each head and zeros.
void fill_query(Arena& arena, const QueryRows& q, DType dtype, Rng& rng, int64_t tokens, int heads, int dims,
                bool one_hot, double peak);

// An int32 array of `count` elements in the arena.
size_t add_ints(Arena& arena, const std::string& name, const std::vector<int32_t>& values);
size_t add_floats(Arena& arena, const std::string& name, const std::vector<float>& values);

// Pointer to region `index` of an arena mirrored at `base` (null for kNoRegion).
template <typename T>
T* at(const Arena& arena, uint8_t* base, size_t index) {
  return index == PlainPool::kNoRegion ? nullptr : reinterpret_cast<T*>(base + arena.region(index).offset);
}

}  // namespace sparse_decode::fuzz
