// Decode context parallelism on one GPU: a dsv4_decode problem's active
// columns dealt to R ranks (support/merge_split.h; window and top-k columns
// in any split, a rank with none), each rank's dsv4_decode over its own
// columns on the device, merge_states over the ranks' (out, lse), compared
// with the fp64 reference of the single call over every column: relative
// L2 <= 3e-3, lse within 1e-3, exact zeros for tokens without an active
// column. Tokens whose active columns all sit on one rank get the bits of
// the single GPU call (batch invariance: a token's bits do not depend on the
// other tokens); the others in general do not: the single call folds its
// column groups into one running softmax and rounds once, the merge weighs
// each rank's BF16-rounded output (docs/kernels/merge.md). Sinks: see
// support/merge_split.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/merge/checks.h"
#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "support/merge_split.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode::gpu_test::merge {
namespace {

using test::SplitRule;
using testing::Dsv4DeviceProblem;

// dsv4_decode on the device with the workspace it asks for; outputs poisoned first.
void decode(Dsv4DeviceProblem& p) {
  p.out.fill_bytes(kPoisonByte);
  p.lse.fill_bytes(kPoisonByte);
  const size_t bytes = workspace_size(p.args);
  DeviceBuffer workspace(std::max<size_t>(bytes, 16));
  const Status status = dsv4_decode(p.args, workspace.get(), bytes, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  cuda(cudaDeviceSynchronize(), "decode");
}

void check_split(const testing::Dsv4ProblemConfig& config, int ranks, SplitRule rule, MergeDType out_dtype) {
  SCOPED_TRACE(test::seed_message(config.seed) + ", " + std::to_string(ranks) + " ranks, " +
               test::split_rule_name(rule) + ", T " + std::to_string(config.tokens) + ", W " +
               std::to_string(config.width) + (out_dtype == MergeDType::kFloat32 ? ", float32 out" : ", BF16 out"));
  const testing::Dsv4Problem problem = testing::make_dsv4_problem(config);
  const test::RankSplit split = test::split_problem(problem, ranks, rule, config.seed + 1);
  std::vector<std::unique_ptr<Dsv4DeviceProblem>> rank_problems;
  std::vector<const void*> outs;
  std::vector<const float*> lses;
  for (const auto& rank : split.ranks) {
    rank_problems.push_back(std::make_unique<Dsv4DeviceProblem>(rank));
    decode(*rank_problems.back());
    outs.push_back(rank_problems.back()->out.get());
    lses.push_back(rank_problems.back()->lse.as<float>());
  }

  const int64_t T = config.tokens;
  const int H = config.heads;
  const int64_t out_bytes = out_dtype == MergeDType::kFloat32 ? 4 : 2;
  DeviceBuffer merged(T * H * kHeadDim * out_bytes), merged_lse(T * H * 4);
  merged.fill_bytes(kPoisonByte);
  merged_lse.fill_bytes(kPoisonByte);
  MergeStatesArgs args;
  args.num_ranks = ranks;
  args.num_tokens = T;
  args.num_heads = H;
  args.partials = outs.data();
  args.partial_token_stride = int64_t{H} * kHeadDim;
  args.lses = lses.data();
  args.lse_token_stride = H;
  args.out_dtype = out_dtype;
  args.out = merged.get();
  args.out_token_stride = int64_t{H} * kHeadDim;
  args.out_lse = merged_lse.as<float>();
  args.out_lse_token_stride = H;
  const Status status = merge_states(args, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  cuda(cudaDeviceSynchronize(), "merge");
  const std::vector<double> got = test::decode_output(merged.download<uint8_t>(), out_dtype);
  const std::vector<float> got_lse = merged_lse.download<float>();

  const reference::Dsv4Result ref = reference::dsv4_decode(problem.host_args(nullptr, nullptr));
  const test::MergeComparison c = test::compare(got, ref.out);
  EXPECT_LE(c.relative_error, kMaxRelativeError);
  EXPECT_EQ(c.non_finite, 0);
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      ASSERT_EQ(got_lse[i], -INFINITY) << "row " << i;
      for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(got[i * kHeadDim + d], 0.0) << "row " << i;
    } else {
      ASSERT_NEAR(got_lse[i], ref.lse[i], 1e-3 * std::max(1.0, std::fabs(ref.lse[i]))) << "row " << i;
    }
  }
  if (out_dtype != MergeDType::kBFloat16) return;

  Dsv4DeviceProblem single(problem);
  decode(single);
  const std::vector<uint8_t> single_out = single.out.download<uint8_t>();
  const std::vector<float> single_lse = single.lse.download<float>();
  const std::vector<uint8_t> merged_out = merged.download<uint8_t>();
  const size_t row = static_cast<size_t>(H) * kHeadDim * 2;
  for (int64_t t = 0; t < T; ++t) {
    if (!split.whole[t]) continue;
    EXPECT_EQ(std::memcmp(&merged_out[t * row], &single_out[t * row], row), 0) << "token " << t;
    EXPECT_EQ(std::memcmp(&got_lse[t * H], &single_lse[t * H], H * 4), 0) << "token " << t;
  }
}

TEST_F(MergeGpu, SplitRanksMatchTheSingleCall) {
  for (SplitRule rule : {SplitRule::kRandom, SplitRule::kWindowOnFirst, SplitRule::kLastRankEmpty}) {
    for (int ranks : {2, 4}) {
      for (int64_t tokens : {1, 6, 48}) {
        testing::Dsv4ProblemConfig config;
        config.tokens = tokens;
        config.width = 640;
        config.sinks = false;
        config.hole_fraction = 0.1;
        config.seed = test::fresh_seed();
        check_split(config, ranks, rule, MergeDType::kBFloat16);
      }
    }
  }
}

TEST_F(MergeGpu, SplitRanksWideRowsBf16AndFloatOutput) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    testing::Dsv4ProblemConfig config;
    config.tokens = 12;
    config.width = 2176;
    config.dtype = dtype;
    config.sinks = false;
    config.seed = test::fresh_seed();
    check_split(config, 8, SplitRule::kRandom, MergeDType::kBFloat16);
    config.seed = test::fresh_seed();
    check_split(config, 3, SplitRule::kWindowOnFirst, MergeDType::kFloat32);
  }
}

TEST_F(MergeGpu, SplitRanksManyHeads) {
  for (int heads : {64, 128}) {
    testing::Dsv4ProblemConfig config;
    config.tokens = 4;
    config.heads = heads;
    config.width = 640;
    config.sinks = false;
    config.seed = test::fresh_seed();
    check_split(config, 2, SplitRule::kRandom, MergeDType::kBFloat16);
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::merge
