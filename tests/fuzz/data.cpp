#include "fuzz/data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "reference/formats.h"

namespace sparse_decode::fuzz {

namespace {

constexpr size_t kTableSize = size_t{1} << 16;

struct Tables {
  std::vector<uint8_t> normal_fp8, wide_fp8;
  std::vector<uint16_t> normal_bf16;
  Tables() {
    Rng rng(0x5EED);
    for (size_t i = 0; i < kTableSize + 1024; ++i) {  // 1024 past the end: a row never wraps
      const double x = rng.normal();
      normal_fp8.push_back(reference::encode_e4m3(x));
      wide_fp8.push_back(reference::encode_e4m3(110.0 * x));
      normal_bf16.push_back(reference::encode_bf16(x));
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

void copy_from_table(Rng& rng, Table table, uint8_t* bytes, int count) {
  const size_t offset = static_cast<size_t>(rng.engine()() % kTableSize);
  const Tables& t = tables();
  if (table == Table::kNormalBf16) {
    std::memcpy(bytes, t.normal_bf16.data() + offset, static_cast<size_t>(count) * 2);
  } else {
    std::memcpy(bytes, (table == Table::kNormalFp8 ? t.normal_fp8 : t.wide_fp8).data() + offset, static_cast<size_t>(count));
  }
}

void put_element(DType dtype, double value, uint8_t* bytes) {
  if (dtype == DType::kFloat8E4M3) {
    bytes[0] = reference::encode_e4m3(value);
  } else {
    const uint16_t bits = reference::encode_bf16(value);
    std::memcpy(bytes, &bits, 2);
  }
}

void put_nan(DType dtype, uint8_t* bytes, int64_t count) {
  if (dtype == DType::kFloat8E4M3) {
    std::memset(bytes, 0x7F, static_cast<size_t>(count));
    return;
  }
  const uint16_t nan = 0x7FC0;
  for (int64_t i = 0; i < count; ++i) std::memcpy(bytes + 2 * i, &nan, 2);
}

KvPool PlainPool::at(const Arena& arena, uint8_t* base) const {
  KvPool p;
  if (region == kNoRegion) return p;
  p.data = base + arena.region(region).offset;
  p.pages = pages;
  p.page_size = page_size;
  p.page_stride = page_stride;
  p.row_stride = row_stride;
  return p;
}

PlainPool add_plain_pool(Arena& arena, Rng& rng, const std::string& name, DType dtype, int64_t max_rows) {
  PlainPool pool;
  const std::vector<int64_t> page_sizes = {1, 1, 2, 3, 16, 64};
  pool.page_size = rng.pick(page_sizes);
  pool.pages = std::max<int64_t>(1, rng.uniform(1, std::max<int64_t>(1, max_rows)) / pool.page_size);
  const int64_t unit = 16 / element_bytes(dtype);  // 16 bytes, in elements
  pool.row_stride = 512 + (rng.chance(0.25) ? unit * rng.uniform(1, 4) : 0);
  pool.page_stride = pool.page_size * pool.row_stride + (rng.chance(0.25) ? unit * rng.uniform(1, 8) : 0);
  pool.region = arena.add(name, static_cast<size_t>(pool.pages * pool.page_stride * element_bytes(dtype)),
                          RegionKind::kInput);
  return pool;
}

void fill_plain_pool(Arena& arena, const PlainPool& pool, DType dtype, Rng& rng, const std::vector<bool>& live) {
  uint8_t* bytes = arena.host(pool.region);
  const int e = element_bytes(dtype);
  put_nan(dtype, bytes, pool.pages * pool.page_stride);
  for (int64_t row = 0; row < pool.rows(); ++row) {
    if (!live[static_cast<size_t>(row)]) continue;
    copy_from_table(rng, dtype == DType::kFloat8E4M3 ? Table::kNormalFp8 : Table::kNormalBf16,
                    bytes + pool.row_offset(row) * e, 512);
  }
}

QueryRows add_query(Arena& arena, Rng& rng, DType dtype, int64_t tokens, int heads, int dims, int stride_unit) {
  QueryRows q;
  q.head_stride = dims + (rng.chance(0.2) ? stride_unit * rng.uniform(1, 4) : 0);
  q.token_stride = heads * q.head_stride + (rng.chance(0.2) ? stride_unit * rng.uniform(1, 4) : 0);
  q.region = arena.add("q", static_cast<size_t>(std::max<int64_t>(tokens, 1) * q.token_stride * element_bytes(dtype)),
                       RegionKind::kInput);
  return q;
}

void fill_query(Arena& arena, const QueryRows& q, DType dtype, Rng& rng, int64_t tokens, int heads, int dims,
                bool one_hot, double peak) {
  uint8_t* bytes = arena.host(q.region);
  const int e = element_bytes(dtype);
  put_nan(dtype, bytes, std::max<int64_t>(tokens, 1) * q.token_stride);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      uint8_t* row = bytes + (t * q.token_stride + h * q.head_stride) * e;
      if (!one_hot) {
        copy_from_table(rng, dtype == DType::kFloat8E4M3 ? Table::kNormalFp8 : Table::kNormalBf16, row, dims);
        continue;
      }
      const int hot = static_cast<int>(rng.uniform(0, dims - 1));
      for (int d = 0; d < dims; ++d) put_element(dtype, d == hot ? peak : 0.0, row + d * e);
    }
  }
}

size_t add_ints(Arena& arena, const std::string& name, const std::vector<int32_t>& values) {
  const size_t index = arena.add(name, std::max<size_t>(values.size(), 1) * 4, RegionKind::kInput);
  if (!values.empty()) std::memcpy(arena.host(index), values.data(), values.size() * 4);
  return index;
}

size_t add_floats(Arena& arena, const std::string& name, const std::vector<float>& values) {
  const size_t index = arena.add(name, std::max<size_t>(values.size(), 1) * 4, RegionKind::kInput);
  if (!values.empty()) std::memcpy(arena.host(index), values.data(), values.size() * 4);
  return index;
}

}  // namespace sparse_decode::fuzz
