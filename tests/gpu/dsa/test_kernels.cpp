// dsa_decode on the GPU over the cases of checks.h: each runs with splits 1,
// 2, 3, 5, 32 and dsa_splits_for(rows), each without and with PDL (same
// bits), and each is checked against the fp64 reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

class DsaGpuCases : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuCases, MatchesReferenceForEverySplit) {
  const Case& c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  if (c.dtype == kFp8) {
    ASSERT_NE(p.k_scale, 1.0f);
    ASSERT_NE(p.v_scale, 1.0f);
  }
  if (c.block == 128) {
    EXPECT_GT(rows_with_cut_blocks(p), 0) << "no block cut by a position";
  }
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided, c.bf16_scales);
  const int32_t rows = static_cast<int32_t>(p.rows());
  const int32_t live = max_live_regions(p);
  for (int32_t splits : {1, 2, 3, 5, 32, dsa_splits_for(rows)}) {
    std::vector<uint16_t> without_pdl;
    for (bool pdl : {false, true}) {
      const std::string name = run_name(splits, pdl) + (splits > live ? " (empty splits)" : "");
      const std::vector<uint16_t> out = run(d, splits, pdl);
      DsaDecodeArgs args = d.args;
      args.splits = splits;
      check_output(out, args, p, ref, name);
      if (!pdl) {
        without_pdl = out;
      } else {
        EXPECT_TRUE(out == without_pdl) << name << ": PDL changed the bits";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuCases, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
