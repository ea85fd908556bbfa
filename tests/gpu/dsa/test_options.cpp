// The layouts dsa_decode accepts beyond the dense one: q broadcast through
// zero strides (strided caches and out run in the cases of test_kernels.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

// q with zero strides (docs/formats/dsa_layout.md decision 10: q may
// broadcast): every row reads row 0's heads, or every head its row's head 0,
// or both.
TEST_F(DsaGpu, BroadcastQuery) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem base = testing::make_dsa_problem(config_of(kCases[1], seed));
  for (auto [row_stride_zero, head_stride_zero] : {std::pair{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(std::string(row_stride_zero ? "q_row_stride 0" : "") + (head_stride_zero ? " q_head_stride 0" : ""));
    DsaProblem p = base;
    if (row_stride_zero) p.q_row_stride = 0;
    if (head_stride_zero) p.q_head_stride = 0;
    const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
    DeviceProblem d(p, false);
    for (int32_t splits : {1, 4}) check_output(run(d, splits, false), d.args, p, ref, run_name(splits, false));
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
