// The workspace of dsv4_decode_hca on the GPU: none for zero tokens (nothing
// launched or written), a refusal that writes nothing when it is too small.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/dsv4_hca/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// T = 0: Ok, workspace 0, nothing launched or written.
TEST_F(Dsv4HcaGpu, ZeroTokensWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 64));
  DeviceProblem d(p);
  prepare_outputs(d);
  Dsv4HcaDecodeArgs args = d.hca;
  args.num_tokens = 0;
  EXPECT_EQ(workspace_size(args), 0u);
  EXPECT_TRUE(supports(args).ok()) << supports(args).message();
  const Status status = dsv4_decode_hca(args, nullptr, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  const DeviceResult r = download(d);
  EXPECT_TRUE(std::all_of(r.out.begin(), r.out.end(), [](uint16_t b) { return b == 0xFFFF; }));
  EXPECT_EQ(r.count, kCountStart);
}

// Too small a workspace: InvalidArgument naming workspace_bytes, nothing written.
TEST_F(Dsv4HcaGpu, TooSmallWorkspaceWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 61));
  DeviceProblem d(p);
  prepare_outputs(d);
  const size_t bytes = workspace_size(d.hca);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  const Status status = dsv4_decode_hca(d.hca, workspace.get(), bytes - 1, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
  const DeviceResult r = download(d);
  EXPECT_TRUE(std::all_of(r.out.begin(), r.out.end(), [](uint16_t b) { return b == 0xFFFF; }));
  EXPECT_EQ(r.count, kCountStart);
  const std::vector<uint8_t> after = workspace.download<uint8_t>();
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == kWorkspacePoison; }));
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
