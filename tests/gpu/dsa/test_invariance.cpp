// Determinism of dsa_decode: the same bits run after run, whatever the
// workspace held before.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

// Same inputs, same splits: the same bits over 20 runs (the workspace
// refilled with a different byte before each), for several splits.
TEST_F(DsaGpu, BitwiseIdenticalOverRepeatedRuns) {
  for (const Case& c : {kCases[1], kCases[6]}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    SCOPED_TRACE(c.label);
    const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
    DeviceProblem d(p, c.strided);
    for (int32_t splits : {1, 3, 4, 32}) {
      DsaDecodeArgs args = d.args;
      args.splits = splits;
      const size_t bytes = workspace_size(args);
      DeviceBuffer workspace = make_workspace(bytes);
      std::vector<uint16_t> first;
      for (int run = 0; run < 20; ++run) {
        workspace.fill_bytes(static_cast<uint8_t>(run * 37));
        d.out.fill_bytes(kPoisonByte);
        const Status status = dsa_decode(args, workspace.get(), bytes, nullptr);
        ASSERT_TRUE(status.ok()) << status.message();
        cuda(cudaDeviceSynchronize(), "dsa_decode");
        std::vector<uint16_t> got = d.out.download<uint16_t>();
        if (run == 0) {
          first = std::move(got);
        } else {
          ASSERT_TRUE(got == first) << "splits " << splits << ": run " << run << " differs from run 0";
        }
      }
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
