// The FP16 gate of dsa_decode on the GPU: the cases with a gate, rerun with
// an FP16 gate (the sigmoid rounded to FP16), one split and several, with
// and without PDL, against the fp64 reference (checks.h: check_output).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

TEST_F(DsaGpu, Float16Gate) {
  int64_t cases = 0;
  for (const Case& c : kCases) {
    if (c.gate == Gate::kNone) continue;
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(std::string(c.label) + ", " + test::seed_message(seed));
    DsaProblemConfig config = config_of(c, seed);
    config.gate_dtype = DsaGateDType::kFloat16;
    const DsaProblem p = testing::make_dsa_problem(config);
    DeviceProblem d(p, c.strided);
    ASSERT_EQ(d.args.gate_dtype, DsaGateDType::kFloat16);
    const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
    for (int32_t splits : {1, 4})
      for (bool pdl : {false, true}) check_output(run(d, splits, pdl), d.args, p, ref, run_name(splits, pdl));
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
