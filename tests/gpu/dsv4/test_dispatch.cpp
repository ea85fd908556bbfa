// The kernel kAuto picks for dsv4_decode (by width, tokens, heads and
// dtype), what it runs when the split workspace is missing, too small or
// misaligned, the reported small-batch limit, and zero tokens.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/dsv4/checks.h"
#include "sparse_decode/introspection.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

TEST_F(Dsv4Gpu, ZeroTokensLaunchesNothing) {
  Dsv4ProblemConfig config = config_for(0, 640);
  Dsv4Problem problem = testing::make_dsv4_problem(config);
  Dsv4DeviceProblem device(problem);
  EXPECT_TRUE(decode(device.args, nullptr).ok());
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "sync");
}

TEST_F(Dsv4Gpu, SmallBatchLimitIsReported) {
  Dsv4DecodeArgs args;
  args.width = 640;
  EXPECT_GT(dsv4_small_batch_max_tokens(args), 0);
  args.dtype = DType::kBFloat16;
  EXPECT_GT(dsv4_small_batch_max_tokens(args), 0);
}

// kAuto runs the cluster (W = 640, T = 6; W = 2176, T = 6) or the stream
// kernel (W = 640, T = 32; BF16 W = 128, T = 6) where the split kernel's
// workspace is missing, too small or misaligned: the same bits as the split
// kernel.
TEST_F(Dsv4Gpu, AutoWithoutTheSplitWorkspaceRunsAnotherKernel) {
  struct Case {
    int64_t tokens;
    int32_t width;
    DType dtype;
  };
  for (const Case& c : {Case{6, 640, DType::kFloat8E4M3}, Case{32, 640, DType::kFloat8E4M3},
                        Case{6, 2176, DType::kFloat8E4M3}, Case{6, 128, DType::kBFloat16}}) {
    Dsv4ProblemConfig config = config_for(c.tokens, c.width, c.dtype);
    Dsv4Problem problem = testing::make_dsv4_problem(config);
    Dsv4DeviceProblem device(problem);
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + ", W " + std::to_string(c.width) + ", T " +
                 std::to_string(c.tokens) + ", seed " + std::to_string(config.seed));
    ASSERT_EQ(dsv4_chosen_kernel(device.args), Dsv4Kernel::kSplit);
    const size_t bytes = workspace_size(device.args);
    ASSERT_GT(bytes, 0u);
    ASSERT_TRUE(dsv4_decode(device.args, workspace_of(bytes), bytes, nullptr).ok());
    const std::vector<uint16_t> split = device.out.download<uint16_t>();
    char* workspace = static_cast<char*>(workspace_of(bytes + 16));
    const std::pair<void*, size_t> short_workspaces[] = {{nullptr, 0}, {workspace, bytes - 16}, {workspace + 8, bytes}};
    for (const auto& [pointer, size] : short_workspaces) {
      device.out.fill_bytes(kPoisonByte);
      ASSERT_TRUE(dsv4_decode(device.args, pointer, size, nullptr).ok());
      EXPECT_EQ(device.out.download<uint16_t>(), split);
      Dsv4DecodeArgs forced = device.args;
      forced.kernel = Dsv4Kernel::kSplit;
      const Status status = dsv4_decode(forced, pointer, size, nullptr);
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
    }
  }
}

TEST_F(Dsv4Gpu, AutoChoosesClusterSplitOrStreamByTokens) {
  Dsv4DecodeArgs args;
  args.width = 640;
  args.num_tokens = 1;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 32;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 48;  // the stream kernel's dim halves from 38 tokens (docs/dispatch.md)
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 64;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.width = 128;  // 2 groups, FP8: no split, and the stream kernel beats the cluster kernel at every T
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 1;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.dtype = DType::kBFloat16;  // width 128, BF16: the split path up to 16 tokens
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 16;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 17;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_heads = 128;  // units are (token, 16-head group) pairs: 8 a token
  args.num_tokens = 2;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 3;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_heads = 16;
  args.width = 2176;  // above 1024, BF16: split up to 44 tokens
  args.num_tokens = 40;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 48;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 6;  // above 1024, BF16: the cluster kernel up to 8 tokens
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kCluster);
  args.dtype = DType::kFloat8E4M3;  // above 1024, FP8: split from 1 token
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 1;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 24;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.width = 640;
  args.num_tokens = 128;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 5000;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.kernel = Dsv4Kernel::kCluster;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kCluster);
}

// 64-head tiles (FP8, H = 64, 128, W <= 1024): the split path or the stream
// kernel, never the cluster kernel; wider calls keep the 16-head rule.
TEST_F(Dsv4Gpu, AutoAt64HeadsChoosesSplitOrStream) {
  Dsv4DecodeArgs args;
  args.width = 640;
  for (int32_t heads : {64, 128}) {
    args.num_heads = heads;
    SCOPED_TRACE("H " + std::to_string(heads));
    for (int64_t tokens : {1, 6, 12, 48, 512, 5000}) {
      args.num_tokens = tokens;
      EXPECT_NE(dsv4_chosen_kernel(args), Dsv4Kernel::kCluster) << "T " << tokens;
    }
    args.num_tokens = 1;
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
    args.num_tokens = 12;  // up to 26 units (132 SMs / 5): split
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
    args.num_tokens = 32;  // the stream kernel's dim halves
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
    args.num_tokens = 5000;
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
    args.width = 128;  // 2 groups: no split
    args.num_tokens = 1;
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
    args.width = 2176;  // 16-head groups: the split path, as for 16 heads
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
    args.width = 640;
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
