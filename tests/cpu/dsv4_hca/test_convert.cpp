// convert_page_aligned_indices (src/dsv4_hca/convert.cpp): a hand-checked
// table, then random canonical section-1 tables (window cut by seq_lens, -1
// holes, lens below 128 and past the width, garbage in inactive columns,
// pages past the pool) whose conversion makes dsv4_decode_hca compute the
// same doubles as dsv4_decode; every refusal names its argument (and, for a
// table that is not canonical, the token and column) and writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/dsv4_hca_checks.h"

namespace sparse_decode {
namespace {

constexpr int32_t kPoison = 0x7EADBEEF;

// Caller-provided outputs, poisoned so that any write shows.
struct Outputs {
  std::vector<int32_t> swa_rows, swa_lens, block_table, hca_seq_lens;
  Outputs(int64_t tokens, int32_t max_pages, int32_t requests)
      : swa_rows(tokens * kSwaColumns, kPoison),
        swa_lens(tokens, kPoison),
        block_table(tokens * max_pages, kPoison),
        hca_seq_lens(requests, kPoison) {}
  bool untouched() const {
    for (const auto* v : {&swa_rows, &swa_lens, &block_table, &hca_seq_lens}) {
      if (std::any_of(v->begin(), v->end(), [](int32_t x) { return x != kPoison; })) return false;
    }
    return true;
  }
};

// Conversion arguments for a section-1 call `s`, into `o`.
Dsv4HcaConvertArgs convert_args(const Dsv4DecodeArgs& s, int64_t page_size, int32_t max_pages, Outputs& o) {
  Dsv4HcaConvertArgs a;
  a.memory = MemorySpace::kHost;
  a.num_tokens = s.num_tokens;
  a.indices = s.indices;
  a.width = s.width;
  a.indices_stride = s.indices_stride;
  a.lens = s.lens;
  a.seq_lens = s.seq_lens;
  a.num_requests = s.num_requests;
  a.cum_seq_lens_q = s.cum_seq_lens_q;
  a.q_len = s.q_len;
  a.max_q_len = s.max_q_len;
  a.page_size = page_size;
  a.swa_rows = o.swa_rows.data();
  a.swa_lens = o.swa_lens.data();
  a.block_table = o.block_table.data();
  a.max_pages = max_pages;
  a.block_table_stride = max_pages;
  a.hca_seq_lens = o.hca_seq_lens.data();
  return a;
}

// One request of two tokens, page size 4, 8 compressed columns.
TEST(Dsv4HcaConvert, HandCheckedTable) {
  constexpr int W = kSwaColumns + 8;
  std::vector<int32_t> indices(2 * W, -1);
  for (int c = 0; c < kSwaColumns; ++c) indices[c] = indices[W + c] = 1000 + c;
  indices[3] = -1;  // a hole inside the window: closes up
  indices[W + 7] = -1;
  indices[W + 60] = INT32_MAX;                                 // past the window of token 1 (p + 1 = 50): dropped
  const int32_t compressed[5] = {28, 29, 30, 31, 13 * 4 + 0};  // pages 7 and 13
  std::copy_n(compressed, 5, &indices[kSwaColumns]);
  indices[kSwaColumns + 6] = 5;  // past lens: never looked at
  std::copy_n(compressed, 5, &indices[W + kSwaColumns]);
  const int32_t lens[2] = {kSwaColumns + 5, 120};  // token 1: lens below 128, no compressed slot
  const int32_t seq_lens[1] = {50};                // positions 48 and 49: windows of 49 and 50 columns
  Dsv4DecodeArgs s;
  s.num_tokens = 2, s.indices = indices.data(), s.width = W, s.indices_stride = W, s.lens = lens;
  s.seq_lens = seq_lens, s.num_requests = 1, s.q_len = 2;
  Outputs o(2, 3, 1);
  const Status status = convert_page_aligned_indices(convert_args(s, 4, 3, o), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();

  std::vector<int32_t> want_rows(2 * kSwaColumns, -1);
  for (int c = 0, k = 0; c < 49; ++c) {
    if (c != 3) want_rows[k++] = 1000 + c;
  }
  for (int c = 0, k = 0; c < 50; ++c) {
    if (c != 7) want_rows[kSwaColumns + k++] = 1000 + c;
  }
  EXPECT_EQ(o.swa_rows, want_rows);
  EXPECT_EQ(o.swa_lens, (std::vector<int32_t>{48, 49}));
  EXPECT_EQ(o.block_table, (std::vector<int32_t>{7, 13, -1, -1, -1, -1}));
  EXPECT_EQ(o.hca_seq_lens, (std::vector<int32_t>{kSwaColumns + 5}));
}

// ---------------------------------------------------------------------------
// Random canonical tables: conversion then HCA gives section 1's doubles.

struct RandomCase {
  int64_t page_size;
  bool varlen;
};
void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << "page_size " << c.page_size << (c.varlen ? " varlen" : "");
}

class Dsv4HcaConvertRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(Dsv4HcaConvertRandom, HcaOfTheConversionEqualsSection1) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  testing::Dsv4HcaProblemConfig c;
  c.seed = seed;
  c.heads = 8;
  c.tokens = 6;
  c.q_len = 3;
  c.varlen = GetParam().varlen;
  c.page_size = GetParam().page_size;
  c.max_pages = static_cast<int32_t>(std::max<int64_t>(1, 200 / c.page_size));
  c.compressed_pages = 2 * c.max_pages;
  testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  // Token 0 has a full live window that seq_lens will cut (p + 1 <= 91 < 128).
  p.swa_lens[0] = kSwaColumns;
  for (int col = 0; col < kSwaColumns; ++col) {
    int32_t& row = p.swa_rows[col];
    if (row < 0 || row >= c.swa_rows) row = static_cast<int32_t>(rng() % c.swa_rows);
    p.fill_row(false, row, rng());
  }
  testing::Dsv4HcaExpansion e = testing::expand_to_section1(p);
  const int32_t W = e.width;
  const int64_t ps = c.page_size;

  // The expansion is canonical; make it a table a serving engine could hold.
  std::vector<int32_t> seq_lens(p.num_requests);
  for (int32_t b = 0; b < p.num_requests; ++b)
    seq_lens[b] = static_cast<int32_t>(c.q_len + rng() % (b == 0 ? 88 : 160));
  int64_t out_of_range_pages = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    int32_t* row = &e.indices[t * W];
    for (int k = 0; k < 3; ++k)
      row[rng() % kSwaColumns] = rng() % 2 ? -1 : static_cast<int32_t>(c.swa_rows + rng() % 9);
    switch (t == 0 ? 3 : rng() % 4) {
      case 0:  // lens below 128
        e.lens[t] = static_cast<int32_t>(rng() % kSwaColumns);
        break;
      case 1: {  // lens past the width: every compressed column active, on live pages
        e.lens[t] = W + 1 + static_cast<int32_t>(rng() % 100);
        for (int64_t j = 0; j < W - kSwaColumns; ++j) {
          const int64_t page =
              (j % ps == 0) ? static_cast<int64_t>(rng() % c.compressed_pages) : row[kSwaColumns + j - 1] / ps;
          row[kSwaColumns + j] = static_cast<int32_t>(page * ps + j % ps);
          p.fill_row(true, row[kSwaColumns + j], rng());
        }
        break;
      }
      case 2:  // a page past the pool, still canonical
        if (e.lens[t] > kSwaColumns) {
          const int64_t first = (rng() % (e.lens[t] - kSwaColumns)) / ps * ps;
          const int64_t page = c.compressed_pages + static_cast<int64_t>(rng() % 4);
          for (int64_t j = first; j < std::min<int64_t>(first + ps, e.lens[t] - kSwaColumns); ++j) {
            row[kSwaColumns + j] = static_cast<int32_t>(page * ps + j % ps);
            ++out_of_range_pages;
          }
        }
        break;
      default:
        break;
    }
    for (int64_t col = std::max(e.lens[t], kSwaColumns); col < W; ++col) row[col] = static_cast<int32_t>(rng());
  }
  std::vector<uint16_t> out(c.tokens * c.heads * kHeadDim);  // for validate(): the references write nothing
  Dsv4DecodeArgs s = e.args(p, out.data(), nullptr);
  s.seq_lens = seq_lens.data();
  s.num_requests = p.num_requests;
  s.cum_seq_lens_q = c.varlen ? p.cum_seq_lens_q.data() : nullptr;
  s.q_len = c.varlen ? 0 : c.q_len;
  s.max_q_len = c.varlen ? c.q_len : 0;
  ASSERT_TRUE(validate(s).ok()) << validate(s).message();

  const int32_t max_pages = static_cast<int32_t>((W - kSwaColumns + ps - 1) / ps);
  Outputs o(c.tokens, max_pages, p.num_requests);
  const Status status = convert_page_aligned_indices(convert_args(s, ps, max_pages, o), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();

  Dsv4HcaDecodeArgs h = p.host_args(out.data(), nullptr);
  h.swa_rows = o.swa_rows.data();
  h.swa_lens = o.swa_lens.data();
  h.block_table = o.block_table.data();
  h.max_pages = max_pages;
  h.block_table_stride = max_pages;
  h.hca_seq_lens = o.hca_seq_lens.data();
  h.lens = e.lens.data();
  ASSERT_TRUE(validate(h).ok()) << validate(h).message();
  const reference::Dsv4Result section1 = reference::dsv4_decode(s);
  test::expect_same_result(reference::dsv4_decode_hca(h), section1, "HCA of the conversion vs section 1");
  EXPECT_GE(section1.out_of_range, out_of_range_pages);
  EXPECT_GT(test::masked_by_seq_lens(s), 0) << "no window was cut by seq_lens: the case tests less than it should";
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaConvertRandom,
                         ::testing::Values(RandomCase{1, false}, RandomCase{2, true}, RandomCase{61, false},
                                           RandomCase{64, true}, RandomCase{256, false}),
                         [](const auto& info) { return "case" + std::to_string(info.index); });

// ---------------------------------------------------------------------------
// Refusals: nothing written.

// A valid call over a small canonical table (2 requests of 2 tokens).
struct SmallTable {
  static constexpr int64_t kPageSize = 4;
  static constexpr int32_t kWidth = kSwaColumns + 12;
  std::vector<int32_t> indices = std::vector<int32_t>(4 * kWidth);
  std::vector<int32_t> lens = std::vector<int32_t>(4, kWidth);
  std::vector<int32_t> seq_lens = {300, 300};
  Outputs outputs{4, 3, 2};
  Dsv4HcaConvertArgs args;
  SmallTable(const SmallTable&) = delete;  // args points into this object
  SmallTable() {
    for (int64_t t = 0; t < 4; ++t) {
      for (int c = 0; c < kSwaColumns; ++c) indices[t * kWidth + c] = c;
      for (int j = 0; j < kWidth - kSwaColumns; ++j) indices[t * kWidth + kSwaColumns + j] = (9 - j / 4) * 4 + j % 4;
    }
    Dsv4DecodeArgs s;
    s.num_tokens = 4, s.indices = indices.data(), s.width = kWidth, s.indices_stride = kWidth, s.lens = lens.data();
    s.seq_lens = seq_lens.data(), s.num_requests = 2, s.q_len = 2;
    args = convert_args(s, kPageSize, 3, outputs);
  }
};

const int32_t kCumSeqLensQ[3] = {0, 2, 4};

struct Refusal {
  std::string label;
  std::function<void(Dsv4HcaConvertArgs&, SmallTable&)> breaks;
  std::string names;
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.label; }

std::vector<Refusal> refusals() {
  using A = Dsv4HcaConvertArgs;
  using S = SmallTable;
  return {
      {"memory", [](A& a, S&) { a.memory = static_cast<MemorySpace>(7); }, "memory"},
      {"num_tokens_negative", [](A& a, S&) { a.num_tokens = -1; }, "num_tokens"},
      {"width_124", [](A& a, S&) { a.width = 124; }, "width"},
      {"width_not_multiple_of_4", [](A& a, S&) { a.width = 138; }, "width"},
      {"width_too_large", [](A& a, S&) { a.width = kSwaColumns + 16384 + 4; }, "width"},
      {"page_size_0", [](A& a, S&) { a.page_size = 0; }, "page_size"},
      {"max_pages_short", [](A& a, S&) { a.max_pages = 2; },
       "max_pages: expected >= max(1, ceil((width - 128) / page_size)) = 3"},
      {"max_pages_0_at_width_128", [](A& a, S&) { a.width = kSwaColumns, a.max_pages = 0; }, "max_pages"},
      {"indices_null", [](A& a, S&) { a.indices = nullptr; }, "indices: "},
      {"indices_unaligned", [](A& a, S&) { a.indices += 1; }, "indices: "},
      {"indices_stride_short", [](A& a, S&) { a.indices_stride = a.width - 4; }, "indices_stride"},
      {"indices_stride_not_multiple_of_4", [](A& a, S&) { a.indices_stride = a.width + 2; }, "indices_stride"},
      {"lens_null", [](A& a, S&) { a.lens = nullptr; }, "lens: "},
      {"seq_lens_null", [](A& a, S&) { a.seq_lens = nullptr; }, "seq_lens: "},
      {"num_requests_0", [](A& a, S&) { a.num_requests = 0; }, "num_requests"},
      {"q_len_0", [](A& a, S&) { a.q_len = 0; }, "q_len"},
      {"num_tokens_not_requests_times_q_len", [](A& a, S&) { a.q_len = 1; }, "num_tokens"},
      {"swa_rows_null", [](A& a, S&) { a.swa_rows = nullptr; }, "swa_rows: "},
      {"swa_rows_unaligned", [](A& a, S&) { a.swa_rows += 1; }, "swa_rows: "},
      {"swa_rows_stride", [](A& a, S&) { a.swa_rows_stride = 127; }, "swa_rows_stride"},
      {"swa_lens_null", [](A& a, S&) { a.swa_lens = nullptr; }, "swa_lens: "},
      {"block_table_null", [](A& a, S&) { a.block_table = nullptr; }, "block_table: "},
      {"block_table_stride", [](A& a, S&) { a.block_table_stride = 2; }, "block_table_stride"},
      {"hca_seq_lens_null", [](A& a, S&) { a.hca_seq_lens = nullptr; }, "hca_seq_lens: "},
      // The table's values: each non-canonical active compressed column.
      {"hole_in_compressed", [](A&, S& s) { s.indices[1 * S::kWidth + kSwaColumns + 5] = -1; },
       "indices: token 1 column 133 = -1: expected the canonical expansion page * page_size + 1"},
      {"wrong_offset", [](A&, S& s) { s.indices[2 * S::kWidth + kSwaColumns + 2] += 1; },
       "indices: token 2 column 130 = 39: expected the canonical expansion page * page_size + 2"},
      {"page_changes_inside_a_page", [](A&, S& s) { s.indices[3 * S::kWidth + kSwaColumns + 7] -= 4; },
       "indices: token 3 column 135 = 31 is in page 7: expected page 8 as column 132"},
  };
}

class Dsv4HcaConvertRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(Dsv4HcaConvertRefusal, NamesTheArgumentAndWritesNothing) {
  const Refusal& r = GetParam();
  SmallTable valid;  // the unbroken table converts
  ASSERT_TRUE(convert_page_aligned_indices(valid.args, nullptr).ok());
  SmallTable broken;
  r.breaks(broken.args, broken);
  for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
    if (r.label != "memory") broken.args.memory = memory;
    const bool static_check = r.names.rfind("indices: token", 0) != 0;
    SCOPED_TRACE(memory == MemorySpace::kHost ? "host memory" : "device memory");
    const Status status = convert_page_aligned_indices(broken.args, nullptr);
    if (!static_check && memory == MemorySpace::kDevice) {
      // The table's values are device data: the device converter would check them on the device.
      EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
    } else {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
      EXPECT_NE(status.message().find(r.names), std::string::npos) << "message: " << status.message();
      EXPECT_NE(status.message().find("expected"), std::string::npos) << "message: " << status.message();
      if (static_check) EXPECT_EQ(validate(broken.args).code(), StatusCode::kInvalidArgument);
    }
    EXPECT_TRUE(broken.outputs.untouched()) << "a refused conversion wrote its outputs";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, Dsv4HcaConvertRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

// Inactive columns (past lens, past the window) need not be canonical; T = 0
// writes nothing; a token that no request holds keeps nothing, unchecked.
TEST(Dsv4HcaConvert, WhatIsNotChecked) {
  SmallTable table;
  table.lens[0] = kSwaColumns + 4;
  table.indices[kSwaColumns + 4] = -1;  // past lens
  table.indices[kSwaColumns + 9] = INT32_MIN;
  ASSERT_TRUE(convert_page_aligned_indices(table.args, nullptr).ok());
  EXPECT_EQ(table.outputs.block_table[0], 9);
  EXPECT_EQ(table.outputs.block_table[1], -1);
  EXPECT_EQ(table.outputs.hca_seq_lens, (std::vector<int32_t>{kSwaColumns + 12, kSwaColumns + 12}));

  SmallTable empty;
  empty.args.num_tokens = 0;
  empty.args.indices = nullptr;
  EXPECT_TRUE(convert_page_aligned_indices(empty.args, nullptr).ok());
  EXPECT_TRUE(empty.outputs.untouched());

  SmallTable padded;  // varlen offsets that stop at token 2: tokens 2 and 3 are padding
  const int32_t cum[3] = {0, 1, 2};
  padded.args.cum_seq_lens_q = cum, padded.args.max_q_len = 2, padded.args.q_len = 0;
  padded.indices[3 * SmallTable::kWidth + kSwaColumns] = -1;  // not canonical, but no request holds it
  ASSERT_TRUE(convert_page_aligned_indices(padded.args, nullptr).ok());
  for (int64_t t : {2, 3}) {
    EXPECT_EQ(padded.outputs.swa_lens[t], 0);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(padded.outputs.block_table[t * 3 + k], -1);
  }
  EXPECT_EQ(padded.outputs.swa_lens[0], kSwaColumns);
}

}  // namespace
}  // namespace sparse_decode
