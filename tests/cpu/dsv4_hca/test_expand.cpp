// The page walk's rules (src/dsv4_hca/expand_rules.h) on the CPU, column by
// column as the kernels' page walk applies them (dsv4/steps/column_source.cuh:
// an entry for columns below 128 + max_pages * page_size, a compressed
// column's row from its page): the table they give is
// testing::expand_to_section1's entry for entry. The kernels are tested on
// the GPU against dsv4_decode on that table (tests/gpu/dsv4_hca/).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "dsv4_hca/expand.h"
#include "dsv4_hca/expand_rules.h"
#include "support/dsv4_hca_checks.h"
#include "reference/requests.h"

namespace sparse_decode {
namespace {

using testing::Dsv4HcaProblem;
using testing::Dsv4HcaProblemConfig;

// The table and lens of the page walk, entry by entry on the host.
testing::Dsv4HcaExpansion expand_by_rules(const Dsv4HcaProblem& p) {
  const auto& c = p.config;
  testing::Dsv4HcaExpansion e;
  e.width = dsv4_hca::expanded_width(c.max_pages, c.page_size);
  e.indices.assign(static_cast<size_t>(c.tokens) * e.width, 0x55555555);
  e.lens.assign(c.tokens, 0x55555555);
  const int32_t ps = static_cast<int32_t>(c.page_size);
  const int32_t columns = kSwaColumns + c.max_pages * ps;  // the columns with an entry
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int32_t b = p.cum_seq_lens_q.empty()
                          ? static_cast<int32_t>(t / c.q_len)
                          : reference::locate_token(t, p.num_requests, p.cum_seq_lens_q.data(), 0).request;
    const int64_t slots = b >= 0 ? dsv4_hca::compressed_slots(p.lens[t], p.hca_seq_lens[b], columns - kSwaColumns) : 0;
    const int32_t len = static_cast<int32_t>(kSwaColumns + slots);
    const int32_t window = dsv4_hca::window_columns(p.swa_lens[t]);
    int32_t* row = &e.indices[t * e.width];
    for (int32_t col = 0; col < e.width; ++col) {
      int32_t index = -1;
      if (col < kSwaColumns) {
        index = col < window ? p.swa_rows[t * kSwaColumns + col] : -1;
      } else if (col < columns && col < len) {
        const int32_t j = col - kSwaColumns;
        index = dsv4_hca::page_row(p.block_table[t * c.max_pages + j / ps], ps, j % ps);
      }
      row[col] = index;
    }
    e.lens[t] = len;
  }
  return e;
}

void expect_same_expansion(const Dsv4HcaProblem& p) {
  const testing::Dsv4HcaExpansion want = testing::expand_to_section1(p), got = expand_by_rules(p);
  ASSERT_EQ(got.width, want.width);
  EXPECT_EQ(got.lens, want.lens);
  for (size_t i = 0; i < want.indices.size(); ++i) {
    ASSERT_EQ(got.indices[i], want.indices[i]) << "token " << i / want.width << " column " << i % want.width;
  }
}

class Dsv4HcaPageWalkRules : public test::HcaEdgeFixture<::testing::TestWithParam<int64_t>> {
 protected:
  Dsv4HcaProblemConfig config(bool varlen) const {
    Dsv4HcaProblemConfig c;
    c.seed = seed_;
    c.page_size = GetParam();
    c.tokens = 12;
    c.q_len = varlen ? 5 : 4;
    c.varlen = varlen;
    c.heads = 8;
    c.max_pages = static_cast<int32_t>(std::max<int64_t>(1, 300 / c.page_size));
    c.compressed_pages = c.max_pages * 2;
    c.hole_fraction = 0.2;
    return c;
  }
};

TEST_P(Dsv4HcaPageWalkRules, EqualExpandToSection1) {
  SCOPED_TRACE(test::seed_message(seed_));
  for (bool varlen : {false, true}) {
    SCOPED_TRACE(varlen ? "varlen" : "uniform");
    start(config(varlen));
    expect_same_expansion(problem_);
    // Pages and rows past the pool (INT32_MAX: the index overflows int32), negative ones.
    test::break_active_ids(problem_, rng_);
    expect_same_expansion(problem_);
    // lens and hca_seq_lens past the footprint: the table's capacity bounds the slots.
    problem_.lens.assign(problem_.lens.size(), INT32_MAX);
    problem_.hca_seq_lens.assign(problem_.hca_seq_lens.size(), INT32_MAX);
    expect_same_expansion(problem_);
    // swa_lens outside 0..128, lens below 128.
    for (int64_t t = 0; t < problem_.config.tokens; ++t) {
      problem_.swa_lens[t] = static_cast<int32_t>(rng_() % 300) - 100;
      problem_.lens[t] = static_cast<int32_t>(rng_() % 300) - 100;
    }
    expect_same_expansion(problem_);
  }
  // Tokens that no request holds.
  Dsv4HcaProblemConfig c = config(true);
  expect_same_expansion(test::with_unheld_tokens(c, 3));
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaPageWalkRules, ::testing::Values(1, 2, 61, 64, 256),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

// The width: 128 + max_pages * page_size rounded up to 4, 0 past 128 + 16384.
TEST(Dsv4HcaPageWalkRules, ExpandedWidth) {
  EXPECT_EQ(dsv4_hca::expanded_width(1, 1), 132);
  EXPECT_EQ(dsv4_hca::expanded_width(3, 61), 312);
  EXPECT_EQ(dsv4_hca::expanded_width(256, 64), 128 + 16384);
  EXPECT_EQ(dsv4_hca::expanded_width(1, 16384), 128 + 16384);
  EXPECT_EQ(dsv4_hca::expanded_width(257, 64), 0);
  EXPECT_EQ(dsv4_hca::expanded_width(1, 16385), 0);
  EXPECT_EQ(dsv4_hca::expanded_width(INT32_MAX, 1), 0);
  EXPECT_EQ(dsv4_hca::expanded_width(1, int64_t{1} << 40), 0);
}

}  // namespace
}  // namespace sparse_decode
