// The expand kernel's rules (src/dsv4_hca/expand_rules.h) on the CPU: the
// table they give is testing::expand_to_section1's entry for entry, and the
// varlen request search finds reference::locate_token's request. The kernel
// runs the same functions per entry (and the search's pivots in parallel);
// its threading is tested on the GPU (tests/gpu/dsv4_hca/test_decode.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <vector>

#include "dsv4_hca/expand.h"
#include "dsv4_hca/expand_rules.h"
#include "support/dsv4_hca_checks.h"
#include "reference/requests.h"

namespace sparse_decode {
namespace {

using testing::Dsv4HcaProblem;
using testing::Dsv4HcaProblemConfig;

// The table and lens of the expand kernel, entry by entry on the host.
testing::Dsv4HcaExpansion expand_by_rules(const Dsv4HcaProblem& p) {
  const auto& c = p.config;
  testing::Dsv4HcaExpansion e;
  e.width = dsv4_hca::expanded_width(c.max_pages, c.page_size);
  e.indices.assign(static_cast<size_t>(c.tokens) * e.width, 0x55555555);
  e.lens.assign(c.tokens, 0x55555555);
  const int32_t ps = static_cast<int32_t>(c.page_size);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int32_t b = p.cum_seq_lens_q.empty() ? static_cast<int32_t>(t / c.q_len)
                                               : dsv4_hca::request_sequential(p.cum_seq_lens_q.data(), p.num_requests, t);
    const int64_t slots = b >= 0 ? dsv4_hca::compressed_slots(p.lens[t], p.hca_seq_lens[b], int64_t{c.max_pages} * ps) : 0;
    const int32_t window = dsv4_hca::window_columns(p.swa_lens[t]);
    int32_t* row = &e.indices[t * e.width];
    for (int32_t col = 0; col < kSwaColumns; ++col) row[col] = col < window ? p.swa_rows[t * kSwaColumns + col] : -1;
    for (int32_t j = 0; kSwaColumns + j < e.width; ++j) {
      row[kSwaColumns + j] = dsv4_hca::compressed_index(&p.block_table[t * c.max_pages], ps, slots, j);
    }
    e.lens[t] = static_cast<int32_t>(kSwaColumns + slots);
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

class Dsv4HcaExpandRules : public test::HcaEdgeFixture<::testing::TestWithParam<int64_t>> {
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

TEST_P(Dsv4HcaExpandRules, EqualExpandToSection1) {
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

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaExpandRules, ::testing::Values(1, 2, 61, 64, 256),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

// The 128-ary search against locate_token's linear scan, on non-decreasing
// offsets with empty requests, a first offset above 0 and tokens past the
// last one, for request counts around the round sizes.
TEST(Dsv4HcaExpandRequests, SearchFindsTheRequestThatHoldsTheToken) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  for (int32_t requests : {1, 2, 3, 127, 128, 129, 130, 255, 16383, 16384, 16385, 40000}) {
    SCOPED_TRACE(::testing::Message() << requests << " requests");
    std::vector<int32_t> cum(requests + 1);
    cum[0] = static_cast<int32_t>(rng() % 3);
    for (int32_t b = 0; b < requests; ++b) cum[b + 1] = cum[b] + static_cast<int32_t>(rng() % 4);  // 0..3 tokens
    const int64_t end = cum[requests] + 3;
    const int64_t step = std::max<int64_t>(1, end / 3000);
    for (int64_t t = 0; t < end; t += 1 + static_cast<int64_t>(rng() % step)) {
      const int32_t want = reference::locate_token(t, requests, cum.data(), 0).request;
      ASSERT_EQ(dsv4_hca::request_sequential(cum.data(), requests, t), want) << "token " << t;
    }
  }
}

// The width: 128 + max_pages * page_size rounded up to 4, 0 past 128 + 16384.
TEST(Dsv4HcaExpandRequests, ExpandedWidth) {
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
