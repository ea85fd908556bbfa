// Section-1 tables for the converter's tests (CPU and GPU): tables that
// FlashInfer's conversion accepts, drawn at random, the changes that make it
// refuse one token, and the converter's arguments over them.
//
// What makes them hard: sequences shorter than the window (partial
// windows), lengths at and around multiples of 128 (a slot more or less),
// window rows in ring order anywhere in the pool (its last row included),
// pages anywhere in the pool (its last page included) and repeated, and
// garbage everywhere the conversion must not look: window columns past the
// window, compressed columns past the token's slots, table columns past
// the longest token, and the padding of every stride.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "reference/dsv4_hca_convert_reference.h"
#include "sparse_decode/dsv4_hca_convert.h"

namespace sparse_decode::test {

struct ConvertTableConfig {
  int32_t requests = 3;
  int32_t q_len = 2;
  int64_t page_size = 16;
  int32_t max_seq_len = 128 * 300;  // seq_lens are drawn up to this (and some below 128)
  int32_t extra_width = 0;          // table columns past the longest token's, rounded to 4
  int64_t stride_pad = 0;           // elements between token rows past the width
  int32_t extra_pages = 0;          // block-table columns past FlashInfer's width
  int64_t swa_pool_rows = 700;
  int64_t compressed_pool_pages = 400;
  bool short_first = false;         // request 0 sees at most 100 positions: seq_lens cuts its windows
  bool long_last = false;           // the last request is at least max_seq_len / 2 long
};

// Values the conversion must never read or copy.
inline int32_t garbage(std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0: return -1;
    case 1: return INT32_MAX;
    case 2: return INT32_MIN;
    case 3: return static_cast<int32_t>(rng());
    default: return 0x7EADBEEF;
  }
}

// A table FlashInfer's conversion accepts, with its arguments in the
// reference's form (max_pages: FlashInfer's width + extra_pages).
inline reference::ConvertInput make_convert_table(const ConvertTableConfig& c, std::mt19937_64& rng) {
  reference::ConvertInput in;
  in.q_len = c.q_len;
  in.page_size = c.page_size;
  in.swa_pool_rows = c.swa_pool_rows;
  in.compressed_pool_pages = c.compressed_pool_pages;
  in.seq_lens.resize(c.requests);
  for (int32_t b = 0; b < c.requests; ++b) {
    int64_t len = 0;
    switch (rng() % 4) {
      case 0: len = c.q_len + static_cast<int64_t>(rng() % 140); break;  // windows cut short
      case 1:  // at a multiple of 128, or one off
        len = 128 * (1 + static_cast<int64_t>(rng() % std::max(1, c.max_seq_len / 128))) +
              static_cast<int64_t>(rng() % 3) - 1;
        break;
      default: len = c.q_len + static_cast<int64_t>(rng() % c.max_seq_len); break;
    }
    if (b == 0 && c.short_first) len = c.q_len + static_cast<int64_t>(rng() % (101 - c.q_len));
    if (b == c.requests - 1 && c.long_last) {
      len = c.max_seq_len / 2 + static_cast<int64_t>(rng() % (c.max_seq_len / 2));
    }
    in.seq_lens[b] = static_cast<int32_t>(std::clamp<int64_t>(len, c.q_len, c.max_seq_len));
  }
  const int64_t T = int64_t{c.requests} * c.q_len;
  int64_t most_slots = 0;
  std::vector<int64_t> visible(T);
  for (int64_t t = 0; t < T; ++t) {
    visible[t] = int64_t{in.seq_lens[t / c.q_len]} - c.q_len + t % c.q_len + 1;
    most_slots = std::max(most_slots, visible[t] / 128);
  }
  in.width = static_cast<int32_t>((128 + most_slots + c.extra_width + 3) / 4 * 4);
  in.stride = in.width + c.stride_pad;
  in.indices.resize(T * in.stride);
  in.lens.resize(T);
  for (auto& v : in.indices) v = garbage(rng);
  for (int64_t t = 0; t < T; ++t) {
    int32_t* row = &in.indices[t * in.stride];
    const int64_t window = std::min<int64_t>(visible[t], 128), slots = visible[t] / 128;
    const int64_t base = static_cast<int64_t>(rng() % c.swa_pool_rows);
    for (int64_t col = 0; col < window; ++col) {  // a ring: consecutive rows that wrap around the pool
      row[col] = static_cast<int32_t>(rng() % 8 == 0 ? c.swa_pool_rows - 1 - col % 2 : (base + col) % c.swa_pool_rows);
    }
    int64_t page = 0;
    for (int64_t j = 0; j < slots; ++j) {
      if (j % c.page_size == 0) {
        page = rng() % 6 == 0 ? c.compressed_pool_pages - 1 : static_cast<int64_t>(rng() % c.compressed_pool_pages);
      }
      row[128 + j] = static_cast<int32_t>(page * c.page_size + j % c.page_size);
    }
    in.lens[t] = static_cast<int32_t>(128 + slots);
  }
  int32_t longest = 0;
  for (int32_t s : in.seq_lens) longest = std::max(longest, s);
  in.max_pages = convert_max_pages(longest, c.page_size) + c.extra_pages;
  return in;
}

// The library's outputs over host vectors, poisoned before each call.
struct ConvertOutputs {
  static constexpr int32_t kPoison = 0x7F0DF00D;
  std::vector<int32_t> swa_rows, swa_lens, block_table, hca_seq_lens, error;
  int64_t swa_rows_stride = 128, block_table_stride = 0;

  ConvertOutputs(const reference::ConvertInput& in, int64_t swa_pad = 0, int64_t table_pad = 0) {
    const int64_t T = static_cast<int64_t>(in.lens.size());
    swa_rows_stride = 128 + swa_pad;
    block_table_stride = in.max_pages + table_pad;
    swa_rows.assign(T * swa_rows_stride, kPoison);
    swa_lens.assign(T, kPoison);
    block_table.assign(T * block_table_stride, kPoison);
    hca_seq_lens.assign(in.seq_lens.size(), kPoison);
    error.assign(kConvertErrorWords, kPoison);
  }
  bool untouched() const {
    for (const auto* v : {&swa_rows, &swa_lens, &block_table, &hca_seq_lens}) {
      if (std::any_of(v->begin(), v->end(), [](int32_t x) { return x != kPoison; })) return false;
    }
    return true;
  }
};

// The converter's arguments over `in` (host pointers), into `o`.
inline Dsv4HcaConvertArgs convert_args(const reference::ConvertInput& in, ConvertOutputs& o) {
  Dsv4HcaConvertArgs a;
  a.memory = MemorySpace::kHost;
  a.num_requests = static_cast<int32_t>(in.seq_lens.size());
  a.q_len = in.q_len;
  a.num_tokens = int64_t{a.num_requests} * a.q_len;
  a.indices = in.indices.data();
  a.width = in.width;
  a.indices_stride = in.stride;
  a.lens = in.lens.data();
  a.seq_lens = in.seq_lens.data();
  a.page_size = in.page_size;
  a.swa_pool_rows = in.swa_pool_rows;
  a.compressed_pool_pages = in.compressed_pool_pages;
  a.swa_rows = o.swa_rows.data();
  a.swa_rows_stride = o.swa_rows_stride;
  a.swa_lens = o.swa_lens.data();
  a.block_table = o.block_table.data();
  a.max_pages = in.max_pages;
  a.block_table_stride = o.block_table_stride;
  a.hca_seq_lens = o.hca_seq_lens.data();
  a.error = o.error.data();
  return a;
}

// The outputs equal the reference's; stride padding stays poisoned.
inline void expect_outputs_match(const ConvertOutputs& o, const reference::ConvertOutput& want,
                                 const reference::ConvertInput& in) {
  const int64_t T = static_cast<int64_t>(in.lens.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < o.swa_rows_stride; ++c) {
      const int32_t expected = c < 128 ? want.swa_rows[t * 128 + c] : ConvertOutputs::kPoison;
      ASSERT_EQ(o.swa_rows[t * o.swa_rows_stride + c], expected) << "swa_rows[" << t << ", " << c << "]";
    }
    for (int64_t k = 0; k < o.block_table_stride; ++k) {
      const int32_t expected = k < in.max_pages ? want.block_table[t * in.max_pages + k] : ConvertOutputs::kPoison;
      ASSERT_EQ(o.block_table[t * o.block_table_stride + k], expected) << "block_table[" << t << ", " << k << "]";
    }
    ASSERT_EQ(o.swa_lens[t], want.swa_lens[t]) << "swa_lens[" << t << "]";
  }
  EXPECT_EQ(o.hca_seq_lens, want.hca_seq_lens);
}

// The report the reference gives: refused tokens, the first, its rule.
inline std::vector<int32_t> expected_report(const reference::ConvertOutput& want) {
  return {want.refused, static_cast<int32_t>(want.first), want.first < 0 ? 0 : want.rule[want.first]};
}

}  // namespace sparse_decode::test
