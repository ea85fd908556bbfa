// The HCA reference (reference::dsv4_decode_hca) and the public host-memory
// backend (dsv4_decode_hca with MemorySpace::kHost) against section 1's
// reference on the equivalent section-1 table (the canonical expansion,
// written independently in testing::expand_to_section1): the two must give
// the same doubles. Every case draws fresh random data from a printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/dsv4_hca_checks.h"

namespace sparse_decode {
namespace {

using testing::Dsv4HcaProblem;
using testing::Dsv4HcaProblemConfig;

// A small problem (8 heads); max_pages keeps the compressed stream near 200 slots.
Dsv4HcaProblemConfig small_config(uint64_t seed, int64_t page_size) {
  Dsv4HcaProblemConfig c;
  c.seed = seed;
  c.page_size = page_size;
  c.heads = 8;
  c.tokens = 4;
  c.q_len = 2;
  c.max_pages = static_cast<int32_t>(std::max<int64_t>(1, 200 / page_size));
  c.compressed_pages = c.max_pages * 2;
  return c;
}

struct RandomCase {
  int64_t page_size;
  int heads;
  int64_t tokens;
  int q_len;
  bool varlen, sinks;
  double holes;
  int64_t page_gap;
};

void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << "page_size " << c.page_size << " heads " << c.heads << " tokens " << c.tokens << " q_len " << c.q_len
      << (c.varlen ? " varlen" : "") << (c.sinks ? " sinks" : "") << " holes " << c.holes << " gap " << c.page_gap;
}

class Dsv4HcaRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(Dsv4HcaRandom, EqualsSection1OnTheExpansion) {
  const RandomCase& rc = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, rc.page_size);
  c.heads = rc.heads;
  c.tokens = rc.tokens;
  c.q_len = rc.q_len;
  c.varlen = rc.varlen;
  c.sinks = rc.sinks;
  c.hole_fraction = rc.holes;
  c.page_gap = rc.page_gap;
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  const reference::Dsv4Result ref = test::check_hca_problem(p);
  // Not trivially zero: most tokens attend something.
  EXPECT_LT(test::empty_tokens(ref, c.heads), c.tokens) << "every token is empty";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Dsv4HcaRandom,
    ::testing::Values(RandomCase{1, 16, 6, 3, false, true, 0.0, 0}, RandomCase{2, 8, 6, 2, false, false, 0.1, 16},
                      RandomCase{61, 16, 7, 4, true, true, 0.0, 0}, RandomCase{64, 32, 4, 4, false, true, 0.2, 32},
                      RandomCase{256, 16, 6, 6, true, true, 0.0, 0}, RandomCase{64, 128, 1, 1, false, true, 0.0, 0},
                      RandomCase{61, 64, 3, 3, false, false, 0.3, 16}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// ---------------------------------------------------------------------------
// Edge cases, each on a random problem then compared with section 1.

class Dsv4HcaEdge : public test::HcaEdgeFixture<::testing::TestWithParam<int64_t>> {
 protected:
  void SetUp() override { start(small_config(seed_, GetParam())); }
};

TEST_P(Dsv4HcaEdge, WindowLengthsZeroAndFull) {
  SCOPED_TRACE(test::seed_message(seed_));
  for (int32_t window : {0, 128, -5, 1000}) {
    SCOPED_TRACE(::testing::Message() << "swa_lens = " << window);
    Dsv4HcaProblem p = problem_;
    // A full window must name live rows: the generator filled only those below swa_lens.
    p.set_window(window, rng_());
    test::check_hca_problem(p);
  }
}

// lens below 128 (negative too) attends no compressed slot; the window is
// swa_lens' alone.
TEST_P(Dsv4HcaEdge, LensBelow128) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  for (int64_t t = 0; t < p.config.tokens; ++t) p.lens[t] = static_cast<int32_t>(rng_() % 129) - 1;
  for (int64_t t = 0; t < p.config.tokens; ++t)
    EXPECT_EQ(reference::hca_compressed_slots(p.host_args(nullptr, nullptr), t), 0);
  test::check_hca_problem(p);
  for (auto& w : p.swa_lens) w = 0;  // and then nothing at all: zeros, lse -inf
  const reference::Dsv4Result ref = test::check_hca_problem(p);
  EXPECT_EQ(test::empty_tokens(ref, p.config.heads), p.config.tokens);
  for (double v : ref.out) ASSERT_EQ(v, 0.0);
}

// lens past the footprint: hca_seq_lens bounds the slots (the same doubles as
// lens = hca_seq_lens), and past it the table's capacity does.
TEST_P(Dsv4HcaEdge, LensPastTheFootprint) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  const auto& c = p.config;
  p.make_table_live(rng_());  // so that the bounds alone decide
  for (int64_t t = 0; t < c.tokens; ++t) p.lens[t] = p.hca_seq_lens[t / c.q_len];
  const reference::Dsv4Result at_footprint = test::check_hca_problem(p);
  for (int64_t t = 0; t < c.tokens; ++t) p.lens[t] += 1 + static_cast<int32_t>(rng_() % 1000);
  test::expect_same_result(test::check_hca_problem(p), at_footprint, "lens past hca_seq_lens");
  p.lens.assign(p.lens.size(), INT32_MAX);
  test::expect_same_result(test::check_hca_problem(p), at_footprint, "lens = INT32_MAX");

  const int64_t capacity = int64_t{c.max_pages} * c.page_size;
  p.hca_seq_lens.assign(p.hca_seq_lens.size(), INT32_MAX);
  const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);
  for (int64_t t = 0; t < c.tokens; ++t) EXPECT_EQ(reference::hca_compressed_slots(args, t), capacity);
  test::check_hca_problem(p);
}

// Table entries past the pages a token needs, and window rows past swa_lens,
// are never read: any garbage there gives the same doubles.
TEST_P(Dsv4HcaEdge, UnneededEntriesNeverRead) {
  SCOPED_TRACE(test::seed_message(seed_));
  const reference::Dsv4Result want = test::check_hca_problem(problem_);
  for (int32_t filler : {-1, INT32_MAX, INT32_MIN, 0}) {
    SCOPED_TRACE(::testing::Message() << "filler " << filler);
    Dsv4HcaProblem p = problem_;
    const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);
    for (int64_t t = 0; t < p.config.tokens; ++t) {
      const int64_t slots = reference::hca_compressed_slots(args, t);
      for (int64_t k = (slots + p.config.page_size - 1) / p.config.page_size; k < p.config.max_pages; ++k) {
        p.block_table[t * p.config.max_pages + k] = filler;
      }
      for (int c = std::clamp(p.swa_lens[t], 0, 128); c < kSwaColumns; ++c) p.swa_rows[t * kSwaColumns + c] = filler;
    }
    test::expect_same_result(reference::dsv4_decode_hca(p.host_args(nullptr, nullptr)), want, "garbage filler");
  }
}

// Pages and window rows past their pool are masked and counted once per
// slot / column that would be active; negative ones are masked, not counted.
TEST_P(Dsv4HcaEdge, OutOfRangeAndNegativeIds) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  const int64_t expected = test::break_active_ids(p, rng_);
  const reference::Dsv4Result result = test::check_hca_problem(p);
  EXPECT_GT(expected, 0);
  EXPECT_EQ(result.out_of_range, expected);
}

// A sink of +inf gives zeros (lse unchanged: the sink is excluded); -inf is
// the same as no sink; a token with nothing active gets zeros and lse -inf
// whatever the sink.
TEST_P(Dsv4HcaEdge, Sinks) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  p.sinks.assign(p.config.heads, INFINITY);
  const reference::Dsv4Result plus = test::check_hca_problem(p);
  p.sinks.assign(p.config.heads, -INFINITY);
  const reference::Dsv4Result minus = test::check_hca_problem(p);
  p.sinks.clear();
  const reference::Dsv4Result none = test::check_hca_problem(p);
  test::expect_same_result(minus, none, "sink -inf vs no sink");
  for (double v : plus.out) ASSERT_EQ(v, 0.0);
  for (size_t i = 0; i < plus.lse.size(); ++i) ASSERT_EQ(plus.lse[i], none.lse[i]);
  EXPECT_LT(test::empty_tokens(none, p.config.heads), p.config.tokens);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaEdge, ::testing::Values(1, 2, 61, 64, 256),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

// A varlen token that no request holds (cum_seq_lens_q stops short of it)
// attends no compressed slot: hca_seq_lens gives it none.
TEST(Dsv4HcaRequests, TokenOutsideEveryRequestHasNoCompressedSlots) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, 64);
  c.tokens = 6;
  const Dsv4HcaProblem p = test::with_unheld_tokens(c, 2);  // the last two tokens: no request
  const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);
  EXPECT_EQ(reference::hca_compressed_slots(args, c.tokens - 1), 0);
  EXPECT_EQ(reference::hca_compressed_slots(args, c.tokens - 2), 0);
  test::check_hca_problem(p);
}

// T = 0: Ok, nothing read or written.
TEST(Dsv4HcaRequests, ZeroTokens) {
  Dsv4HcaDecodeArgs args;
  args.memory = MemorySpace::kHost;
  args.max_pages = 1;
  EXPECT_TRUE(dsv4_decode_hca(args, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(reference::dsv4_decode_hca(args).out.empty());
}

// Strided out and lse: the same values at the strided places, the padding untouched.
TEST(Dsv4HcaOutputs, StridedOutAndLse) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 61));
  const int64_t T = p.config.tokens;
  const int H = p.config.heads;
  const test::HostOutput contiguous = test::run_hca_host(p.host_args(nullptr, nullptr));
  const int64_t head_stride = kHeadDim + 64, token_stride = H * head_stride + 128, lse_stride = H + 3;
  std::vector<uint16_t> out(T * token_stride, test::kOutPoison);
  std::vector<float> lse(T * lse_stride, test::lse_poison());
  int32_t count = test::kCountStart;
  Dsv4HcaDecodeArgs args = p.host_args(out.data(), lse.data());
  args.out_head_stride = head_stride;
  args.out_token_stride = token_stride;
  args.lse_token_stride = lse_stride;
  args.out_of_range_count = &count;
  ASSERT_TRUE(dsv4_decode_hca(args, nullptr, 0, nullptr).ok());
  test::expect_strided_outputs(contiguous, T, H, out, token_stride, head_stride, lse, lse_stride, count);
}

// Deterministic: the same inputs give the same bits, run after run.
TEST(Dsv4HcaOutputs, Deterministic) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 64));
  const test::HostOutput first = test::run_hca_host(p.host_args(nullptr, nullptr));
  const test::HostOutput second = test::run_hca_host(p.host_args(nullptr, nullptr));
  EXPECT_TRUE(first.out == second.out);
  EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float)), 0);
}

// The generator's contract: every row no active column or slot names is NaN.
TEST(Dsv4HcaProblem, InactiveRowsAreNaN) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 2));
  const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);
  std::vector<uint8_t> swa_live(p.config.swa_rows, 0), compressed_live(args.compressed_kv.rows(), 0);
  for (int64_t t = 0; t < p.config.tokens; ++t) {
    for (int c = 0; c < kSwaColumns; ++c) {
      const reference::HcaRowState s = reference::hca_swa_column(args, t, c);
      if (s.active) swa_live[s.row] = 1;
    }
    for (int64_t j = 0; j < reference::hca_compressed_slots(args, t); ++j) {
      const reference::HcaRowState s = reference::hca_compressed_slot(args, t, j);
      if (s.active) compressed_live[s.row] = 1;
    }
  }
  auto check = [](const KvPool& pool, const std::vector<uint8_t>& live, const char* name) {
    int64_t nan_rows = 0;
    for (int64_t r = 0; r < pool.rows(); ++r) {
      const auto* row = static_cast<const uint8_t*>(pool.data) + (r / pool.page_size) * pool.page_stride +
                        (r % pool.page_size) * pool.row_stride;
      const bool nan = std::all_of(row, row + kHeadDim, [](uint8_t b) { return (b & 0x7F) == 0x7F; });
      const bool finite = std::none_of(row, row + kHeadDim, [](uint8_t b) { return (b & 0x7F) == 0x7F; });
      EXPECT_TRUE(live[r] ? finite : nan) << name << " row " << r << (live[r] ? " is live" : " is not live");
      nan_rows += nan;
    }
    EXPECT_GT(nan_rows, 0) << name;
  };
  check(args.swa_kv, swa_live, "swa_kv");
  check(args.compressed_kv, compressed_live, "compressed_kv");
}

}  // namespace
}  // namespace sparse_decode
