// The fp64 reference of merge_states (src/reference/merge_reference.cpp) and
// the CPU backend through the public call: against the test-side
// transcription of SPEC section 5, and its properties: one rank is the
// identity, empty ranks are never used, tokens empty everywhere give zeros,
// lse far from 0 neither overflows nor underflows, the order of the
// non-empty ranks changes the result only by rounding, and the pointer
// lists, a stacked base and FlashInfer's [T, R, H, D] layout are the same
// call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "reference/formats.h"
#include "reference/merge_reference.h"
#include "sparse_decode/merge_states.h"
#include "support/merge_checks.h"
#include "support/test_support.h"

namespace sparse_decode {
namespace {

using test::MergeCase;
using test::MergeCaseConfig;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The public call on host memory with poisoned outputs: out bytes and out_lse.
struct HostMerge {
  std::vector<uint8_t> out;
  std::vector<float> lse;
};
HostMerge run_host(MergeCase& m, bool with_lse = true) {
  const int64_t bytes = m.config.out_dtype == MergeDType::kFloat32 ? 4 : 2;
  HostMerge r;
  r.out.assign(static_cast<size_t>(m.out_elements() * bytes), 0xFF);  // NaN in both dtypes
  r.lse.assign(static_cast<size_t>(m.config.tokens * m.config.heads), std::nanf(""));
  const MergeStatesArgs args = m.host_args(r.out.data(), with_lse ? r.lse.data() : nullptr);
  const Status status = merge_states(args, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  if (!with_lse) r.lse.clear();
  return r;
}

void expect_matches_spec(MergeCase& m, uint64_t seed) {
  SCOPED_TRACE(test::seed_message(seed));
  const test::MergeExpected expected = test::brute_merge(m);
  const HostMerge got = run_host(m);
  const std::vector<double> values = test::decode_output(got.out, m.config.out_dtype);
  // The CPU backend rounds a double once: within half an ulp of its dtype.
  const double ulp = m.config.out_dtype == MergeDType::kFloat32 ? 0x1p-24 : 0x1p-8;
  int64_t bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    bad += !(std::fabs(values[i] - expected.out[i]) <= ulp * std::fabs(expected.out[i]) * 1.0001 + 1e-300);
  }
  EXPECT_EQ(bad, 0) << "elements past half an ulp of the spec's value";
  for (size_t i = 0; i < expected.lse.size(); ++i) {
    if (std::isinf(expected.lse[i])) {
      EXPECT_EQ(got.lse[i], kNegInf) << "row " << i;
    } else {
      EXPECT_NEAR(got.lse[i], expected.lse[i], 1e-6 * std::max(1.0, std::fabs(expected.lse[i]))) << "row " << i;
    }
  }
  EXPECT_EQ(test::nonzero_in_empty_rows(m, got.out, got.lse), 0);
}

TEST(MergeReference, MatchesTheSpecForEveryDtypePair) {
  for (MergeDType in : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
    for (MergeDType out : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
      for (bool stacked : {false, true}) {
        MergeCaseConfig c;
        c.partial_dtype = in;
        c.out_dtype = out;
        c.stacked = stacked;
        c.seed = test::fresh_seed();
        MergeCase m = test::make_merge_case(c);
        expect_matches_spec(m, c.seed);
      }
    }
  }
}

TEST(MergeReference, OtherHeadDimsAndRankCounts) {
  for (int dim : {8, 64, 128, 192, 256, 1024}) {
    for (int ranks : {1, 2, 3, 8, kMergeMaxRanks}) {
      MergeCaseConfig c;
      c.head_dim = dim;
      c.ranks = ranks;
      c.heads = 3;
      c.tokens = 3;
      c.seed = test::fresh_seed();
      SCOPED_TRACE("head_dim " + std::to_string(dim) + ", ranks " + std::to_string(ranks));
      MergeCase m = test::make_merge_case(c);
      expect_matches_spec(m, c.seed);
    }
  }
}

TEST(MergeReference, OneRankIsTheIdentity) {
  for (MergeDType dtype : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
    MergeCaseConfig c;
    c.ranks = 1;
    c.partial_dtype = c.out_dtype = dtype;
    c.empty_fraction = 0.0;
    c.empty_token = false;
    c.seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(c.seed));
    MergeCase m = test::make_merge_case(c);
    m.set_partial(0, 0, 0, 0, -0.0);  // a signed zero comes back too
    const HostMerge got = run_host(m);
    const int64_t bytes = m.element_bytes();
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int h = 0; h < c.heads; ++h) {
        const uint8_t* want = &m.partials[(t * m.token_stride + h * m.head_stride) * bytes];
        const uint8_t* have = &got.out[(t * c.heads + h) * c.head_dim * bytes];
        ASSERT_EQ(std::memcmp(want, have, c.head_dim * bytes), 0) << "token " << t << ", head " << h;
        ASSERT_EQ(got.lse[t * c.heads + h], m.lses[m.lse_index(0, t, h)]);
      }
    }
  }
}

TEST(MergeReference, EmptyRanksAreNeitherUsedNorWeighed) {
  // Ranks 1 and 3 empty everywhere (their partials are NaN): the merge is the
  // merge of ranks 0 and 2 alone, bit for bit.
  MergeCaseConfig c;
  c.ranks = 4;
  c.empty_fraction = 0.0;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase four = test::make_merge_case(c);
  MergeCaseConfig c2 = c;
  c2.ranks = 2;
  MergeCase two = test::make_merge_case(c2);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      for (int r : {1, 3}) four.lses[four.lse_index(r, t, h)] = kNegInf;
      for (int r : {0, 1}) {
        const int from = 2 * r;
        two.lses[two.lse_index(r, t, h)] = four.lses[four.lse_index(from, t, h)];
        for (int d = 0; d < c.head_dim; ++d) two.set_partial(r, t, h, d, four.partial(from, t, h, d));
      }
    }
  }
  const HostMerge a = run_host(four), b = run_host(two);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0);
  for (double v : test::decode_output(a.out, c.out_dtype)) ASSERT_FALSE(std::isnan(v));
}

TEST(MergeReference, TokensEmptyOnEveryRankGiveZeros) {
  MergeCaseConfig c;
  c.ranks = 3;
  c.tokens = 4;
  c.empty_fraction = 0.0;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase m = test::make_merge_case(c);
  for (int r = 0; r < c.ranks; ++r) {
    for (int h = 0; h < c.heads; ++h) m.lses[m.lse_index(r, 2, h)] = kNegInf;
  }
  for (MergeDType out : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
    m.config.out_dtype = out;
    const HostMerge got = run_host(m);
    EXPECT_EQ(test::nonzero_in_empty_rows(m, got.out, got.lse), 0);
    const size_t row_bytes = c.heads * c.head_dim * (out == MergeDType::kFloat32 ? 4 : 2);
    EXPECT_TRUE(std::all_of(got.out.begin() + 2 * row_bytes, got.out.begin() + 3 * row_bytes,
                            [](uint8_t b) { return b == 0; }))
        << "+0.0 bits expected";
  }
}

TEST(MergeReference, LargeAndTinyLseNeitherOverflowNorUnderflow) {
  // exp(lse) alone overflows (1e4) or underflows (-1e4) in any precision;
  // weights depend on differences only.
  for (double center : {1e4, -1e4, 88.0, -104.0}) {
    MergeCaseConfig c;
    c.ranks = 3;
    c.lse_center = center;
    c.lse_spread = 3.0;
    c.seed = test::fresh_seed();
    SCOPED_TRACE("lse around " + std::to_string(center));
    MergeCase m = test::make_merge_case(c);
    expect_matches_spec(m, c.seed);
  }
  // Exact weights: lse = 1e4 and 1e4 + log(3) weigh 1/4 and 3/4.
  MergeCaseConfig c;
  c.ranks = 2;
  c.tokens = 1;
  c.heads = 1;
  c.head_dim = 8;
  c.empty_fraction = 0.0;
  c.empty_token = false;
  c.partial_dtype = c.out_dtype = MergeDType::kFloat32;
  MergeCase m = test::make_merge_case(c);
  const float base = 1e4f;
  m.lses = {base, static_cast<float>(base + std::log(3.0))};
  for (int d = 0; d < 8; ++d) m.set_partial(0, 0, 0, d, 4.0), m.set_partial(1, 0, 0, d, 8.0);
  const double lse1 = m.lses[1], lse0 = m.lses[0];  // float rounding of the second lse, as the call sees it
  const double w1 = 1.0 / (1.0 + std::exp(lse0 - lse1));
  const HostMerge got = run_host(m);
  for (double v : test::decode_output(got.out, c.out_dtype)) EXPECT_NEAR(v, 4.0 * (1 - w1) + 8.0 * w1, 1e-5);
  EXPECT_NEAR(got.lse[0], lse1 + std::log1p(std::exp(lse0 - lse1)), 1e-2);
}

TEST(MergeReference, InfiniteOrNanLseGivesNan) {
  MergeCaseConfig c;
  c.ranks = 2;
  c.tokens = 2;
  c.heads = 2;
  c.empty_fraction = 0.0;
  c.empty_token = false;
  c.seed = test::fresh_seed();
  MergeCase m = test::make_merge_case(c);
  m.lses[m.lse_index(1, 0, 1)] = std::numeric_limits<float>::infinity();
  m.lses[m.lse_index(0, 1, 0)] = std::nanf("");
  const HostMerge got = run_host(m);
  const std::vector<double> values = test::decode_output(got.out, c.out_dtype);
  auto row_is_nan = [&](int64_t t, int h) {
    const size_t at = (t * c.heads + h) * c.head_dim;
    return std::all_of(values.begin() + at, values.begin() + at + c.head_dim, [](double v) { return std::isnan(v); });
  };
  EXPECT_TRUE(row_is_nan(0, 1));
  EXPECT_TRUE(row_is_nan(1, 0));
  EXPECT_FALSE(row_is_nan(0, 0));
  EXPECT_TRUE(std::isnan(got.lse[1]) && std::isnan(got.lse[2]));
}

TEST(MergeReference, OrderOfNonEmptyRanksChangesOnlyRounding) {
  MergeCaseConfig c;
  c.ranks = 5;
  c.partial_dtype = MergeDType::kFloat32;
  c.out_dtype = MergeDType::kFloat32;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase m = test::make_merge_case(c);
  std::vector<int> order(c.ranks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(c.seed));
  MergeCase permuted = m;
  for (int r = 0; r < c.ranks; ++r) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int h = 0; h < c.heads; ++h) {
        permuted.lses[permuted.lse_index(r, t, h)] = m.lses[m.lse_index(order[r], t, h)];
        for (int d = 0; d < c.head_dim; ++d) permuted.set_partial(r, t, h, d, m.partial(order[r], t, h, d));
      }
    }
  }
  const reference::MergeResult a = reference::merge_states(m.host_args(nullptr, nullptr));
  const reference::MergeResult b = reference::merge_states(permuted.host_args(nullptr, nullptr));
  // Row by row (an element alone may cancel to near zero): relative L2 of the difference.
  double largest = 0.0;
  for (size_t row = 0; row < a.lse.size(); ++row) {
    double diff2 = 0.0, norm2 = 0.0;
    for (int d = 0; d < c.head_dim; ++d) {
      const double x = a.out[row * c.head_dim + d], y = b.out[row * c.head_dim + d];
      diff2 += (x - y) * (x - y), norm2 += x * x;
    }
    if (norm2 > 0) largest = std::max(largest, std::sqrt(diff2 / norm2));
  }
  EXPECT_LE(largest, 1e-14) << "beyond double rounding";
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::isinf(a.lse[i])) {
      EXPECT_EQ(a.lse[i], b.lse[i]);
    } else {
      EXPECT_NEAR(a.lse[i], b.lse[i], 1e-12 * std::max(1.0, std::fabs(a.lse[i])));
    }
  }
}

TEST(MergeReference, PointerListsStackedBaseAndFlashInferLayoutAgree) {
  MergeCaseConfig c;
  c.ranks = 3;
  c.head_pad = 0;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase m = test::make_merge_case(c);
  const HostMerge listed = run_host(m);
  m.config.stacked = true;
  const HostMerge stacked = run_host(m);
  EXPECT_EQ(listed.out, stacked.out);

  // FlashInfer's merge_states layout: v [T, R, H, D], s [T, R, H] (and here
  // an [H, T] out_lse, as vLLM's merge_attn_states writes it).
  const int64_t R = c.ranks, T = c.tokens, H = c.heads, D = c.head_dim;
  std::vector<uint16_t> v(static_cast<size_t>(T * R * H * D));
  std::vector<float> s(static_cast<size_t>(T * R * H));
  for (int r = 0; r < R; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        s[(t * R + r) * H + h] = m.lses[m.lse_index(r, t, h)];
        for (int d = 0; d < D; ++d) v[((t * R + r) * H + h) * D + d] = reference::encode_bf16(m.partial(r, t, h, d));
      }
    }
  }
  std::vector<uint16_t> out(static_cast<size_t>(T * H * D), test::kOutPoison);
  std::vector<float> out_lse(static_cast<size_t>(T * H), std::nanf(""));
  MergeStatesArgs a;
  a.memory = MemorySpace::kHost;
  a.num_ranks = c.ranks;
  a.num_tokens = T;
  a.num_heads = c.heads;
  a.partial_base = v.data();
  a.partial_rank_stride = H * D;
  a.partial_token_stride = R * H * D;
  a.partial_head_stride = D;
  a.lse_base = s.data();
  a.lse_rank_stride = H;
  a.lse_token_stride = R * H;
  a.out = out.data();
  a.out_token_stride = H * D;
  a.out_lse = out_lse.data();
  a.out_lse_token_stride = 1;
  a.out_lse_head_stride = T;
  const Status status = merge_states(a, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(std::memcmp(out.data(), listed.out.data(), listed.out.size()), 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      EXPECT_EQ(std::memcmp(&out_lse[h * T + t], &listed.lse[t * H + h], 4), 0) << "token " << t << ", head " << h;
    }
  }
}

TEST(MergeReference, OutLseIsOptional) {
  MergeCaseConfig c;
  c.seed = test::fresh_seed();
  MergeCase m = test::make_merge_case(c);
  const HostMerge with = run_host(m), without = run_host(m, false);
  EXPECT_EQ(with.out, without.out);
}

TEST(MergeReference, NoTokensWritesNothing) {
  MergeCaseConfig c;
  c.tokens = 0;
  MergeCase m = test::make_merge_case(c);
  uint16_t out = test::kOutPoison;
  MergeStatesArgs args = m.host_args(&out, nullptr);
  EXPECT_TRUE(merge_states(args, nullptr).ok());
  EXPECT_EQ(out, test::kOutPoison);
  args.memory = MemorySpace::kDevice;  // nothing to launch: no device needed
  EXPECT_TRUE(supports(args).ok());
  EXPECT_TRUE(merge_states(args, nullptr).ok());
}

}  // namespace
}  // namespace sparse_decode
