// The FP8 kernels against the fp64 reference over the FP8 cases of
// checks.h: the direct kernel (DsaKernel::kDirect) at every split count and
// the split kernel (kStaged: each tile converted into a BF16 K tile and an
// FP16 V tile; kAuto runs the direct kernel on these cases) at several, with
// and without PDL, the same bits run after run; queries far outside FP16's
// range and heads of different magnitudes (the direct kernel's per-head
// power-of-two scale); and what kAuto keeps running.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

DsaDecodeArgs direct_args(const DeviceProblem& d, int32_t splits, bool pdl) {
  DsaDecodeArgs args = d.args;
  args.kernel = DsaKernel::kDirect;
  args.splits = splits;
  args.enable_pdl = pdl;
  return args;
}

// `kernel` over the FP8 case `c` at each of `splits` and the default
// split count, each without, with and again without PDL: the fp64
// reference's bound and the same bits run after run.
void check_every_split_and_repeats(const Case& c, DsaKernel kernel, std::initializer_list<int32_t> splits,
                                   const std::string& label) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  ASSERT_NE(p.k_scale, 1.0f);
  ASSERT_NE(p.v_scale, 1.0f);
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided);
  std::vector<int32_t> counts(splits);
  counts.push_back(dsa_splits_for(static_cast<int32_t>(p.rows())));
  for (int32_t count : counts) {
    std::vector<uint16_t> first;
    for (bool pdl : {false, true, false}) {
      DsaDecodeArgs args = direct_args(d, count, pdl);
      args.kernel = kernel;
      const std::vector<uint16_t> out = run(d, args);
      const std::string name = label + ", " + run_name(count, pdl);
      check_output(out, args, p, ref, name);
      if (first.empty()) {
        first = out;
      } else {
        EXPECT_TRUE(out == first) << name << ": the bits differ from the first run";
      }
    }
  }
}

class DsaGpuDirect : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuDirect, MatchesReferenceForEverySplitAndRepeats) {
  check_every_split_and_repeats(GetParam(), DsaKernel::kDirect, {1, 2, 3, 5, 32}, "direct");
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuDirect, ::testing::ValuesIn(fp8_cases()),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

class DsaGpuStaged : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuStaged, MatchesReferenceForEverySplitAndRepeats) {
  check_every_split_and_repeats(GetParam(), DsaKernel::kStaged, {1, 3, 32}, "staged");
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuStaged, ::testing::ValuesIn(fp8_cases()),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

// q's BF16 bits times 2^shift (finite non-zero values; the NaN of rows no
// one reads stays).
void scale_q(DsaProblem& p, int shift) {
  for (uint16_t& bits : p.q) {
    const int exponent = (bits >> 7) & 0xFF;
    if (exponent == 0 || exponent == 0xFF) continue;
    const int scaled = exponent + shift;
    ASSERT_GT(scaled, 0);
    ASSERT_LT(scaled, 0xFF);
    bits = static_cast<uint16_t>((bits & 0x807F) | (scaled << 7));
  }
}

// The same scores from q * 2^shift and scale * 2^-shift: q past FP16's
// largest value (2^16) and below its smallest normal (2^-24) only pass with
// each head's power of two.
TEST_F(DsaGpu, DirectKeepsQueriesOutsideHalfRange) {
  for (int shift : {16, -24}) {
    SCOPED_TRACE("q * 2^" + std::to_string(shift));
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    DsaProblem p = testing::make_dsa_problem(config_of(kCases[7], seed));
    scale_q(p, shift);
    p.scale = std::ldexp(p.scale, -shift);
    const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
    DeviceProblem d(p, false);
    for (int32_t splits : {1, 4}) {
      const DsaDecodeArgs args = direct_args(d, splits, false);
      check_output(run(d, args), args, p, ref, "direct, " + run_name(splits, false));
    }
  }
}

// q's BF16 bits of `head` in every row times 2^shift (as scale_q), or zeros
// with `zero`.
void scale_q_head(DsaProblem& p, int head, int shift, bool zero) {
  for (int64_t r = 0; r < p.rows(); ++r) {
    for (int d = 0; d < kDsaHeadDim; ++d) {
      uint16_t& bits = p.q[static_cast<size_t>(r * p.q_row_stride + head * p.q_head_stride + d)];
      const int exponent = (bits >> 7) & 0xFF;
      if (exponent == 0xFF) continue;  // the NaN of rows no one reads
      if (zero) {
        bits = 0;
        continue;
      }
      if (exponent == 0) continue;
      const int scaled = exponent + shift;
      ASSERT_GT(scaled, 0);
      ASSERT_LT(scaled, 0xFF);
      bits = static_cast<uint16_t>((bits & 0x807F) | (scaled << 7));
    }
  }
}

// Each head its own power of two: heads h and h + 8 (one thread's pair in
// the fragments) get different shifts, so a scale taken from the wrong head
// moves its logits by 2^2 or more; head 6's q is all zeros (shift 0, every
// logit 0: the mean of the values).
TEST_F(DsaGpu, DirectScalesEachHeadByItsOwnPowerOfTwo) {
  constexpr int kShift[16] = {3, -3, 1, -1, 2, -2, 0, 3, -2, 2, -1, 1, -3, 3, 2, -3};
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  DsaProblem p = testing::make_dsa_problem(config_of(kCases[7], seed));
  ASSERT_EQ(p.config.heads, 16);
  for (int h = 0; h < 16; ++h) scale_q_head(p, h, kShift[h], h == 6);
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, false);
  for (int32_t splits : {1, 4}) {
    const DsaDecodeArgs args = direct_args(d, splits, false);
    check_output(run(d, args), args, p, ref, "direct, " + run_name(splits, false));
  }
}

// kAuto runs the direct kernel on an FP8 cache: its bits are kDirect's
// (from 8 launched splits with the splits folded in a cluster).
TEST_F(DsaGpu, AutoRunsTheDirectKernel) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[1], seed));
  DeviceProblem d(p, false);
  ASSERT_GE(d.args.num_regions, 8) << "8 splits must launch 8 (a cluster fold)";
  for (int32_t splits : {1, 4, 8}) {
    DsaDecodeArgs args = d.args;
    args.splits = splits;
    args.kernel = DsaKernel::kAuto;
    const std::vector<uint16_t> automatic = run(d, args);
    args.kernel = DsaKernel::kDirect;
    EXPECT_TRUE(run(d, args) == automatic) << "splits " << splits;
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
