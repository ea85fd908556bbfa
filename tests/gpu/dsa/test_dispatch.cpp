// The workspace of dsa_decode and what a call launches: nothing for zero
// rows (a captured graph holds no node), a refusal that writes nothing when
// the split workspace is missing, short or misaligned, none needed at one
// split.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

// rows == 0: Ok, workspace 0, nothing launched (the capture records no node)
// and nothing written; null pointers are fine too.
TEST_F(DsaGpu, ZeroRowsLaunchesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[1], seed));
  DeviceProblem d(p, false);
  DsaDecodeArgs empty_args;
  empty_args.memory = MemorySpace::kDevice;
  empty_args.num_rows = 0;
  empty_args.block_size = 16;  // validate() checks these before it sees no rows
  empty_args.num_regions = 1;
  DsaDecodeArgs zero_rows = d.args;
  zero_rows.num_rows = 0;
  for (DsaDecodeArgs args : {zero_rows, empty_args}) {
    for (int32_t splits : {1, 4, 32}) {
      SCOPED_TRACE("splits " + std::to_string(splits));
      args.splits = splits;
      EXPECT_EQ(workspace_size(args), 0u);
      const Status supported = supports(args);
      EXPECT_TRUE(supported.ok()) << supported.message();
      d.out.fill_bytes(kPoisonByte);
      cudaStream_t stream = nullptr;
      cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
      cudaGraph_t graph = nullptr;
      cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
      const Status status = dsa_decode(args, nullptr, 0, stream);
      cuda(cudaStreamEndCapture(stream, &graph), "end capture");
      EXPECT_TRUE(status.ok()) << status.message();
      size_t nodes = 0;
      cuda(cudaGraphGetNodes(graph, nullptr, &nodes), "graph nodes");
      EXPECT_EQ(nodes, 0u) << "a call with no rows launched something";
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
      EXPECT_TRUE(dsa_decode(args, nullptr, 0, nullptr).ok());
      cuda(cudaDeviceSynchronize(), "sync");
      const std::vector<uint16_t> out = d.out.download<uint16_t>();
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t b) { return b == kOutPoison; }));
    }
  }
}

// Device memory with splits > 1 needs the workspace: null or one byte short
// (or misaligned) is InvalidArgument naming it, and nothing is written (out
// and the workspace keep their poison). A bad argument too (splits 33).
TEST_F(DsaGpu, RefusedWorkspaceWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[1], seed));
  DeviceProblem d(p, false);
  DsaDecodeArgs args = d.args;
  args.splits = 4;
  const size_t bytes = workspace_size(args);
  ASSERT_EQ(bytes, documented_workspace_bytes(args));
  ASSERT_GT(bytes, 0u);
  DeviceBuffer workspace = make_workspace(bytes + 16, 0x55);
  auto* base = static_cast<uint8_t*>(workspace.get());
  struct Refusal {
    const char* label;
    DsaDecodeArgs args;
    void* workspace;
    size_t bytes;
    const char* names;
  };
  DsaDecodeArgs bad_splits = args;
  bad_splits.splits = 33;
  const Refusal refusals[] = {
      {"null workspace, right size", args, nullptr, bytes, "workspace"},
      {"null workspace, 0 bytes", args, nullptr, 0, "workspace_bytes"},
      {"one byte short", args, base, bytes - 1, "workspace_bytes"},
      {"misaligned by 8 bytes", args, base + 8, bytes, "workspace"},
      {"splits 33", bad_splits, base, bytes + 16, "splits"},
  };
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(refusal.label);
    d.out.fill_bytes(kPoisonByte);
    const Status status = dsa_decode(refusal.args, refusal.workspace, refusal.bytes, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find(refusal.names), std::string::npos) << status.message();
    cuda(cudaDeviceSynchronize(), "sync");
    const std::vector<uint16_t> out = d.out.download<uint16_t>();
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t b) { return b == kOutPoison; }))
        << "a refused call wrote out";
    const std::vector<uint8_t> after = workspace.download<uint8_t>();
    EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == 0x55; }))
        << "a refused call wrote the workspace";
  }
  // One split needs none: null and 0 bytes run.
  args.splits = 1;
  EXPECT_EQ(workspace_size(args), 0u);
  check_output(run(d, args), args, p, reference::dsa_decode(p.host_args(nullptr)), "splits 1, no workspace");
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
