// The choice of dsv4_decode_packed on the GPU: a forced kSplit without its
// workspace is refused and writes nothing, kAuto without one runs another
// kernel; kAuto runs the 64-head forms by (token, 64-head group) units;
// zero tokens launch nothing.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// A forced kSplit without a workspace that fits is refused, naming the
// argument, and writes nothing; kAuto without one runs another kernel.
TEST_F(Dsv4PackedGpu, SplitPathWithoutItsWorkspace) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  const DeviceResult with_workspace = check_against_reference(problem, device);
  ASSERT_GT(workspace_size(device.args), 0u) << "kAuto at 12 tokens of 10 chunks runs the split path";
  device.args.kernel = Dsv4PackedKernel::kSplit;
  const size_t needed = workspace_size(device.args);
  for (size_t bytes : {size_t{0}, needed - 16}) {
    device.out.fill_bytes(kPoisonByte);
    const Status status = dsv4_decode_packed(device.args, bytes ? device.workspace.get() : nullptr, bytes, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
    const std::vector<uint16_t> untouched = device.out.download<uint16_t>();
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint16_t v) { return v == 0xFFFF; }));
  }
  const Status misaligned = dsv4_decode_packed(device.args, device.workspace.as<uint8_t>() + 8, needed, nullptr);
  EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument);
  device.args.kernel = Dsv4PackedKernel::kAuto;
  gpu_test::poison_outputs(device.out, device.lse, device.out_of_range_count);
  ASSERT_TRUE(dsv4_decode_packed(device.args, nullptr, 0, nullptr).ok());
  const DeviceResult without = gpu_test::download_outputs(device.out, device.lse, device.out_of_range_count);
  test::expect_rows_close(without.out_values(), with_workspace.out_values(), c.tokens, c.heads, kMaxRelativeError,
                          "kAuto without the workspace vs with it");
}

// kAuto at 64 and 128 heads and W = 640, by (token, 64-head group) units:
// from 67 the bits of a forced kStreamH64; from 34 with the workspace those
// of a forced kSplitH64, without it those of kStream; below 34 those of
// kStream (one CTA a 16-head unit); each against the reference.
TEST_F(Dsv4PackedGpu, AutoRunsTheH64FormsByUnits) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  struct Case {
    int heads;
    int64_t tokens;
    Dsv4PackedKernel runs;
  };
  const Case cases[] = {{64, 67, Dsv4PackedKernel::kStreamH64}, {128, 34, Dsv4PackedKernel::kStreamH64},
                        {64, 66, Dsv4PackedKernel::kSplitH64},  {128, 17, Dsv4PackedKernel::kSplitH64},
                        {64, 34, Dsv4PackedKernel::kSplitH64},  {64, 33, Dsv4PackedKernel::kStream},
                        {128, 16, Dsv4PackedKernel::kStream}};
  for (const Case& k : cases) {
    SCOPED_TRACE("H " + std::to_string(k.heads) + ", T " + std::to_string(k.tokens));
    Dsv4PackedProblemConfig c = config_for(seed + static_cast<uint64_t>(k.tokens * k.heads), k.tokens);
    c.heads = k.heads;
    Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
    PackedDeviceProblem device(problem);
    EXPECT_EQ(workspace_size(device.args) > 0, k.runs == Dsv4PackedKernel::kSplitH64)
        << "kAuto asks for a workspace where it runs a split path";
    const DeviceResult automatic = check_against_reference(problem, device);
    device.args.kernel = k.runs;
    const DeviceResult forced = run_device(device);
    EXPECT_TRUE(automatic.out == forced.out) << "kAuto's bits are not the forced kernel's";
    EXPECT_TRUE(automatic.lse == forced.lse) << "kAuto's lse is not the forced kernel's";
    if (k.runs != Dsv4PackedKernel::kSplitH64) continue;
    device.args.kernel = Dsv4PackedKernel::kAuto;  // without the workspace: the 16-head stream kernel
    gpu_test::poison_outputs(device.out, device.lse, device.out_of_range_count);
    ASSERT_TRUE(dsv4_decode_packed(device.args, nullptr, 0, nullptr).ok());
    const DeviceResult without = gpu_test::download_outputs(device.out, device.lse, device.out_of_range_count);
    device.args.kernel = Dsv4PackedKernel::kStream;
    const DeviceResult stream = run_device(device);
    EXPECT_TRUE(without.out == stream.out) << "kAuto without the workspace is not kStream's bits";
  }
}

TEST_F(Dsv4PackedGpu, ZeroTokensLaunchesNothing) {
  Dsv4PackedDecodeArgs args;
  args.memory = MemorySpace::kDevice;
  args.num_tokens = 0;
  args.swa.width = 128;
  EXPECT_TRUE(supports(args).ok()) << supports(args).message();
  EXPECT_TRUE(dsv4_decode_packed(args, nullptr, 0, nullptr).ok());
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "sync");
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
