// convert_page_aligned_indices on the host (src/dsv4_hca/convert.cpp):
// FlashInfer's documented cases worked by hand, a small table worked by
// hand, convert_max_pages, random tables against the reference
// (reference::convert_reference, FlashInfer's checks written out), and the
// property the conversion exists for: dsv4_decode_hca on the converted
// metadata computes the same doubles as dsv4_decode on the table.
// The refusals are in test_convert_refusals.cpp.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/dsv4_hca_checks.h"
#include "support/dsv4_hca_convert_tables.h"

namespace sparse_decode {
namespace {

using test::ConvertOutputs;

constexpr int32_t kInactive = INT32_MAX;  // what FlashInfer's own cases put in inactive columns

// FlashInfer's documented case: two requests of two tokens, seq_lens {128,
// 16512}, so the tokens see 127, 128, 16511 and 16512 positions: windows of
// 127, 128, 128, 128 columns and 0, 1, 128, 129 compressed slots (lens 128,
// 129, 256, 257). Window rows rotate in a 1024-row pool; compressed pages
// (t * pages + k + 5) mod 32 of a 32-page pool. The table's width (132 or
// 644 compressed columns) does not change the output; the block table has
// 2 tiles of 128 slots = 256 / page_size columns (the longest sequence
// backs 129 slots); hca_seq_lens = 128 + floor(seq_lens / 128) = {129, 257}.
reference::ConvertInput flashinfer_case(int64_t page_size, int32_t compressed_columns) {
  reference::ConvertInput in;
  in.q_len = 2;
  in.seq_lens = {128, 16512};
  in.lens = {128, 129, 256, 257};
  in.page_size = page_size;
  in.swa_pool_rows = 1024;
  in.compressed_pool_pages = 32;
  in.width = kSwaColumns + compressed_columns;
  in.stride = in.width;
  in.max_pages = static_cast<int32_t>(256 / page_size);
  const int32_t windows[4] = {127, 128, 128, 128}, shifts[4] = {7, 31, 63, 95};
  const int64_t pages_a_row = 256 / page_size;
  in.indices.assign(4 * in.stride, kInactive);
  for (int64_t t = 0; t < 4; ++t) {
    int32_t* row = &in.indices[t * in.stride];
    for (int c = 0; c < windows[t]; ++c) row[c] = static_cast<int32_t>(t * 128 + (c + shifts[t]) % 128);
    for (int64_t j = 0; j < in.lens[t] - kSwaColumns; ++j) {
      const int64_t page = (t * pages_a_row + j / page_size + 5) % 32;
      row[kSwaColumns + j] = static_cast<int32_t>(page * page_size + j % page_size);
    }
  }
  return in;
}

class Dsv4HcaConvertFlashInferCase : public ::testing::TestWithParam<int64_t> {};

TEST_P(Dsv4HcaConvertFlashInferCase, OutputsWorkedByHandAndIndependentOfTheTableWidth) {
  const int64_t ps = GetParam();
  const int32_t pages = static_cast<int32_t>(256 / ps);
  ASSERT_EQ(convert_max_pages(16512, ps), pages);
  std::vector<int32_t> first_table;
  for (int32_t compressed_columns : {132, 132 + 512}) {
    SCOPED_TRACE(::testing::Message() << "page_size " << ps << ", " << compressed_columns << " compressed columns");
    const reference::ConvertInput in = flashinfer_case(ps, compressed_columns);
    ConvertOutputs o(in);
    const Status status = convert_page_aligned_indices(test::convert_args(in, o), nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(o.error, (std::vector<int32_t>{0, -1, 0}));
    EXPECT_EQ(o.swa_lens, (std::vector<int32_t>{127, 128, 128, 128}));
    EXPECT_EQ(o.hca_seq_lens, (std::vector<int32_t>{129, 257}));
    const int32_t windows[4] = {127, 128, 128, 128}, slots[4] = {0, 1, 128, 129};
    for (int64_t t = 0; t < 4; ++t) {
      for (int c = 0; c < kSwaColumns; ++c) {
        const int32_t want = c < windows[t] ? in.indices[t * in.stride + c] : 0;
        ASSERT_EQ(o.swa_rows[t * kSwaColumns + c], want) << "token " << t << " column " << c;
      }
      for (int32_t k = 0; k < pages; ++k) {
        const int32_t want = k * ps < slots[t] ? static_cast<int32_t>((t * pages + k + 5) % 32) : 0;
        ASSERT_EQ(o.block_table[t * pages + k], want) << "token " << t << " page " << k;
      }
    }
    if (first_table.empty()) first_table = o.block_table;
    EXPECT_EQ(o.block_table, first_table) << "padding the table changed the block table";
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaConvertFlashInferCase, ::testing::Values(16, 32, 128),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

// FlashInfer's documented case without compressed slots: one token that
// sees 1 position, a table of only the window, page size 128: swa_lens 1,
// one block-table column of padding, hca_seq_lens 128.
TEST(Dsv4HcaConvert, NoCompressedSlots) {
  reference::ConvertInput in;
  in.q_len = 1;
  in.seq_lens = {1};
  in.lens = {128};
  in.page_size = 128;
  in.swa_pool_rows = 128;
  in.compressed_pool_pages = 1;
  in.width = kSwaColumns;
  in.stride = kSwaColumns;
  in.max_pages = convert_max_pages(1, 128);
  ASSERT_EQ(in.max_pages, 1);
  in.indices.assign(kSwaColumns, kInactive);
  in.indices[0] = 77;
  ConvertOutputs o(in);
  const Status status = convert_page_aligned_indices(test::convert_args(in, o), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<int32_t> want_rows(kSwaColumns, 0);
  want_rows[0] = 77;
  EXPECT_EQ(o.swa_rows, want_rows);
  EXPECT_EQ(o.swa_lens, (std::vector<int32_t>{1}));
  EXPECT_EQ(o.block_table, (std::vector<int32_t>{0}));
  EXPECT_EQ(o.hca_seq_lens, (std::vector<int32_t>{128}));
}

// One request of two tokens that see 1152 and 1153 positions (9 slots each),
// page size 4: pages 7, 3, 12 for token 0 and 2, 2, 9 for token 1 (a page
// may repeat); one tile of 128 slots = 32 block-table columns.
TEST(Dsv4HcaConvert, SmallTableWorkedByHand) {
  reference::ConvertInput in;
  in.q_len = 2;
  in.seq_lens = {1153};
  in.lens = {137, 137};
  in.page_size = 4;
  in.swa_pool_rows = 5000;
  in.compressed_pool_pages = 13;
  in.width = 140;
  in.stride = 144;
  in.max_pages = 32;
  in.indices.assign(2 * in.stride, -1);  // -1 past the slots and in the stride padding: never read
  const int32_t pages[2][3] = {{7, 3, 12}, {2, 2, 9}};
  for (int64_t t = 0; t < 2; ++t) {
    for (int c = 0; c < kSwaColumns; ++c) in.indices[t * in.stride + c] = static_cast<int32_t>(4000 + 100 * t + c);
    for (int j = 0; j < 9; ++j) in.indices[t * in.stride + kSwaColumns + j] = pages[t][j / 4] * 4 + j % 4;
  }
  ConvertOutputs o(in, /*swa_pad=*/4, /*table_pad=*/3);
  const Status status = convert_page_aligned_indices(test::convert_args(in, o), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(o.swa_lens, (std::vector<int32_t>{128, 128}));
  EXPECT_EQ(o.hca_seq_lens, (std::vector<int32_t>{137}));
  for (int64_t t = 0; t < 2; ++t) {
    for (int c = 0; c < kSwaColumns; ++c) EXPECT_EQ(o.swa_rows[t * 132 + c], 4000 + 100 * t + c);
    for (int c = kSwaColumns; c < 132; ++c) EXPECT_EQ(o.swa_rows[t * 132 + c], ConvertOutputs::kPoison);
    for (int k = 0; k < 35; ++k) {
      const int32_t want = k < 3 ? pages[t][k] : k < 32 ? 0 : ConvertOutputs::kPoison;
      EXPECT_EQ(o.block_table[t * 35 + k], want) << "token " << t << " column " << k;
    }
  }
}

// FlashInfer's block-table width: the longest sequence's slots floor(len /
// 128), in whole tiles of 128 slots, in pages; at least 1.
TEST(Dsv4HcaConvert, MaxPages) {
  EXPECT_EQ(convert_max_pages(0, 2), 1);
  EXPECT_EQ(convert_max_pages(-5, 2), 1);
  EXPECT_EQ(convert_max_pages(255, 64), 2);           // 1 slot: one tile of 2 pages
  EXPECT_EQ(convert_max_pages(127, 64), 1);           // no slot
  EXPECT_EQ(convert_max_pages(128 * 128, 2), 64);     // 128 slots: one tile
  EXPECT_EQ(convert_max_pages(128 * 129 - 1, 2), 64); // still 128 slots
  EXPECT_EQ(convert_max_pages(128 * 129, 2), 128);    // 129 slots: two tiles
  EXPECT_EQ(convert_max_pages(16512, 128), 2);
  EXPECT_EQ(convert_max_pages(INT32_MAX, 2), 131072 * 64);  // 16777215 slots: 131072 tiles
  for (int64_t bad : {-2, 0, 1, 3, 48, 256}) EXPECT_EQ(convert_max_pages(1000, bad), 0) << "page_size " << bad;
}

// ---------------------------------------------------------------------------
// Random tables: the reference's outputs, and the report of an accepted table.

struct RandomCase {
  int64_t page_size;
  int32_t q_len;
  int32_t extra_width, stride_pad, extra_pages, swa_pad, table_pad;
};
void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << "page_size " << c.page_size << " q_len " << c.q_len << " +" << c.extra_width << " columns, stride +"
      << c.stride_pad << ", +" << c.extra_pages << " pages";
}

class Dsv4HcaConvertRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(Dsv4HcaConvertRandom, OutputsAreTheReferences) {
  const RandomCase& rc = GetParam();
  for (int round = 0; round < 4; ++round) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    std::mt19937_64 rng(seed);
    test::ConvertTableConfig c;
    c.requests = 1 + static_cast<int32_t>(rng() % 4);
    c.q_len = rc.q_len;
    c.page_size = rc.page_size;
    c.extra_width = rc.extra_width;
    c.stride_pad = rc.stride_pad;
    c.extra_pages = rc.extra_pages;
    const reference::ConvertInput in = test::make_convert_table(c, rng);
    const reference::ConvertOutput want = reference::convert_reference(in);
    ASSERT_EQ(want.refused, 0) << "the table generator made a table FlashInfer refuses";
    EXPECT_EQ(in.max_pages, want.flashinfer_max_pages + rc.extra_pages);
    ConvertOutputs o(in, rc.swa_pad, rc.table_pad);
    const Status status = convert_page_aligned_indices(test::convert_args(in, o), nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(o.error, (std::vector<int32_t>{0, -1, 0}));
    test::expect_outputs_match(o, want, in);
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, Dsv4HcaConvertRandom,
                         ::testing::Values(RandomCase{2, 1, 0, 0, 0, 0, 0}, RandomCase{4, 3, 8, 4, 1, 4, 2},
                                           RandomCase{8, 2, 0, 1, 0, 0, 0}, RandomCase{16, 4, 100, 0, 3, 0, 5},
                                           RandomCase{32, 1, 4, 7, 0, 12, 0}, RandomCase{64, 2, 0, 0, 2, 0, 1},
                                           RandomCase{128, 3, 512, 3, 0, 0, 0}, RandomCase{128, 1, 0, 0, 1, 8, 0}),
                         [](const auto& info) { return "case" + std::to_string(info.index); });

// ---------------------------------------------------------------------------
// dsv4_decode_hca on the conversion computes dsv4_decode on the table.

class Dsv4HcaConvertDecode : public ::testing::TestWithParam<int64_t> {};

TEST_P(Dsv4HcaConvertDecode, HcaOfTheConversionEqualsSection1) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  test::ConvertTableConfig c;
  c.requests = 3;
  c.q_len = 2;
  c.page_size = GetParam();
  c.max_seq_len = 128 * 220;
  c.extra_width = 12;
  c.swa_pool_rows = 640;
  c.compressed_pool_pages = 64 * 128 / c.page_size;
  c.short_first = true;
  c.long_last = true;
  const reference::ConvertInput in = test::make_convert_table(c, rng);

  testing::Dsv4HcaProblemConfig pc;  // q, pools and sinks; its own table is not used
  pc.seed = seed;
  pc.heads = 8;
  pc.tokens = int64_t{c.requests} * c.q_len;
  pc.q_len = c.q_len;
  pc.page_size = c.page_size;
  pc.max_pages = in.max_pages;
  pc.compressed_pages = c.compressed_pool_pages;
  pc.swa_rows = c.swa_pool_rows;
  testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(pc);
  for (int64_t t = 0; t < pc.tokens; ++t) {  // every row the table makes active is live
    const int32_t* row = &in.indices[t * in.stride];
    for (int col = 0; col < in.lens[t]; ++col) {
      const bool window = col < kSwaColumns;
      if (window && col >= std::min<int64_t>(in.seq_lens[t / c.q_len] - c.q_len + t % c.q_len + 1, kSwaColumns)) {
        continue;
      }
      p.fill_row(!window, row[col], seed ^ (static_cast<uint64_t>(row[col]) << 1 | window));
    }
  }

  std::vector<uint16_t> out(pc.tokens * pc.heads * kHeadDim);  // for validate(): the references write nothing
  const Dsv4HcaDecodeArgs hca_base = p.host_args(out.data(), nullptr);
  testing::Dsv4HcaExpansion table;  // the table in the expansion's form, for its section-1 arguments
  ASSERT_EQ(in.stride, in.width);
  table.indices = in.indices;
  table.lens = in.lens;
  table.width = in.width;
  Dsv4DecodeArgs s = table.args(p, out.data(), nullptr);
  s.seq_lens = in.seq_lens.data();
  s.num_requests = c.requests;
  s.q_len = c.q_len;
  ASSERT_TRUE(validate(s).ok()) << validate(s).message();

  ConvertOutputs o(in);
  const Status status = convert_page_aligned_indices(test::convert_args(in, o), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  Dsv4HcaDecodeArgs h = hca_base;
  h.swa_rows = o.swa_rows.data();
  h.swa_lens = o.swa_lens.data();
  h.block_table = o.block_table.data();
  h.max_pages = in.max_pages;
  h.block_table_stride = o.block_table_stride;
  h.hca_seq_lens = o.hca_seq_lens.data();
  h.lens = in.lens.data();
  ASSERT_TRUE(validate(h).ok()) << validate(h).message();
  const reference::Dsv4Result section1 = reference::dsv4_decode(s);
  test::expect_same_result(reference::dsv4_decode_hca(h), section1, "HCA of the conversion vs section 1");
  EXPECT_GT(test::masked_by_seq_lens(s), 0) << "no window was cut by seq_lens: the case tests less than it should";
  int64_t slots = 0;
  for (int32_t l : in.lens) slots += l - kSwaColumns;
  EXPECT_GT(slots, 0) << "no compressed slot: the case tests less than it should";
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaConvertDecode, ::testing::Values(2, 16, 64, 128),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

}  // namespace
}  // namespace sparse_decode
