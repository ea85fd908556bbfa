// Decode context parallelism on the CPU backend: a dsv4_decode problem's
// active columns dealt to R ranks (support/merge_split.h), each rank's call
// over its own columns, merge_states over the ranks' (out, lse), compared
// with the fp64 reference of the single call over every column: relative
// L2 <= 3e-3, lse within 1e-5, zeros for tokens without an active column.
// Tokens whose active columns all sit on one rank get the single call's bits
// exactly; the others do not in general (the single call normalizes once
// over all columns, the merge re-weights each rank's rounded output: see
// docs/kernels/merge.md). Sinks: see support/merge_split.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/merge_states.h"
#include "support/merge_checks.h"
#include "support/merge_split.h"
#include "support/test_support.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

using test::SplitRule;

struct HostOutputs {
  std::vector<uint16_t> out;  // [T, H, 512] BF16 bits, poisoned before the call
  std::vector<float> lse;     // [T, H], poisoned before the call
};

HostOutputs decode_host(const testing::Dsv4Problem& problem) {
  const auto& c = problem.config;
  HostOutputs o{std::vector<uint16_t>(static_cast<size_t>(c.tokens * c.heads * kHeadDim), test::kOutPoison),
                std::vector<float>(static_cast<size_t>(c.tokens * c.heads), std::nanf(""))};
  const Status status = dsv4_decode(problem.host_args(o.out.data(), o.lse.data()), nullptr, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  return o;
}

void check_split(const testing::Dsv4ProblemConfig& config, int ranks, SplitRule rule) {
  SCOPED_TRACE(test::seed_message(config.seed) + ", " + std::to_string(ranks) + " ranks, " +
               test::split_rule_name(rule) + ", T " + std::to_string(config.tokens) + ", W " +
               std::to_string(config.width));
  const testing::Dsv4Problem problem = testing::make_dsv4_problem(config);
  const test::RankSplit split = test::split_problem(problem, ranks, rule, config.seed + 1);
  std::vector<HostOutputs> partial;
  for (const auto& rank : split.ranks) partial.push_back(decode_host(rank));

  const int64_t T = config.tokens;
  const int H = config.heads;
  std::vector<const void*> outs;
  std::vector<const float*> lses;
  for (const auto& p : partial) outs.push_back(p.out.data()), lses.push_back(p.lse.data());
  HostOutputs merged{std::vector<uint16_t>(static_cast<size_t>(T * H * kHeadDim), test::kOutPoison),
                     std::vector<float>(static_cast<size_t>(T * H), std::nanf(""))};
  MergeStatesArgs args;
  args.memory = MemorySpace::kHost;
  args.num_ranks = ranks;
  args.num_tokens = T;
  args.num_heads = H;
  args.partials = outs.data();
  args.partial_token_stride = int64_t{H} * kHeadDim;
  args.lses = lses.data();
  args.lse_token_stride = H;
  args.out = merged.out.data();
  args.out_token_stride = int64_t{H} * kHeadDim;
  args.out_lse = merged.lse.data();
  args.out_lse_token_stride = H;
  const Status status = merge_states(args, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();

  const reference::Dsv4Result ref = reference::dsv4_decode(problem.host_args(nullptr, nullptr));
  std::vector<double> got(merged.out.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = reference::decode_bf16(merged.out[i]);
  const test::MergeComparison c = test::compare(got, ref.out);
  EXPECT_LE(c.relative_error, 3e-3);
  EXPECT_EQ(c.non_finite, 0);
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      ASSERT_EQ(merged.lse[i], -INFINITY) << "row " << i;
      for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(merged.out[i * kHeadDim + d], 0) << "row " << i;
    } else {
      ASSERT_NEAR(merged.lse[i], ref.lse[i], 1e-5 * std::max(1.0, std::fabs(ref.lse[i]))) << "row " << i;
    }
  }

  const HostOutputs single = decode_host(problem);
  const size_t row = static_cast<size_t>(H) * kHeadDim;
  for (int64_t t = 0; t < T; ++t) {
    if (!split.whole[t]) continue;
    EXPECT_EQ(std::memcmp(&merged.out[t * row], &single.out[t * row], row * 2), 0) << "token " << t;
    EXPECT_EQ(std::memcmp(&merged.lse[t * H], &single.lse[t * H], H * 4), 0) << "token " << t;
  }
}

TEST(MergeSplitRanks, MergedRanksMatchTheSingleCall) {
  for (SplitRule rule : {SplitRule::kRandom, SplitRule::kWindowOnFirst, SplitRule::kLastRankEmpty}) {
    for (int ranks : {2, 3, 4}) {
      testing::Dsv4ProblemConfig config;
      config.tokens = 4;
      config.width = 384;
      config.sinks = false;
      config.hole_fraction = 0.1;
      config.seed = test::fresh_seed();
      check_split(config, ranks, rule);
    }
  }
}

TEST(MergeSplitRanks, WideRowsBf16AndOneRank) {
  testing::Dsv4ProblemConfig config;
  config.tokens = 3;
  config.width = 2176;
  config.dtype = DType::kBFloat16;
  config.sinks = false;
  config.seed = test::fresh_seed();
  check_split(config, 8, SplitRule::kRandom);
  config.width = 640;
  config.seed = test::fresh_seed();
  check_split(config, 1, SplitRule::kRandom);  // one rank: the merge is the identity
}

}  // namespace
}  // namespace sparse_decode
