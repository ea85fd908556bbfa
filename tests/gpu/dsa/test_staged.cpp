// The split kernel on FP8 caches (DsaKernel::kStaged: each tile converted
// into a BF16 K tile and an FP16 V tile) against the fp64 reference over the
// FP8 cases of checks.h: split counts from one to 32 with and without PDL,
// the same bits run after run. kAuto runs the direct kernel on these cases
// (test_direct.cpp); BF16 caches run the split kernel in test_kernels.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

class DsaGpuStaged : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuStaged, MatchesReferenceForEverySplitAndRepeats) {
  const Case& c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  ASSERT_NE(p.k_scale, 1.0f);
  ASSERT_NE(p.v_scale, 1.0f);
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided);
  const int32_t rows = static_cast<int32_t>(p.rows());
  for (int32_t splits : {1, 3, 32, dsa_splits_for(rows)}) {
    std::vector<uint16_t> first;
    for (bool pdl : {false, true, false}) {
      DsaDecodeArgs args = d.args;
      args.kernel = DsaKernel::kStaged;
      args.splits = splits;
      args.enable_pdl = pdl;
      const std::vector<uint16_t> out = run(d, args);
      const std::string name = "staged, " + run_name(splits, pdl);
      check_output(out, args, p, ref, name);
      if (first.empty()) {
        first = out;
      } else {
        EXPECT_TRUE(out == first) << name << ": the bits differ from the first run";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuStaged, ::testing::ValuesIn(fp8_cases()),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
