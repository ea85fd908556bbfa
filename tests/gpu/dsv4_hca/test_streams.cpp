// dsv4_decode_hca among other work on a stream: with PDL after a kernel that
// writes the metadata late, two calls in a row on one workspace, and
// captured in a CUDA graph.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "gpu/dsv4_hca/checks.h"
#include "support/delayed_copy.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// PDL: the kernels wait for the previous kernel before they read the
// metadata (a kernel writes block_table and lens late, releasing its
// dependents at once); and two calls in a row on one workspace, both with
// PDL, give each its own result.
TEST_F(Dsv4HcaGpu, PdlWaitsForTheKernelThatWritesTheMetadata) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = batch_problem(seed, 64, 32, 4);
  DeviceProblem d(p);
  const DeviceResult want = run_hca(d);

  cudaStream_t stream = nullptr;
  testing::check_cuda(static_cast<int>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)), "stream");
  DeviceProblem late(p);
  late.hca.enable_pdl = true;
  DeviceBuffer table_source(p.block_table), lens_source(p.lens);
  prepare_outputs(late);
  late.block_table.fill_bytes(0xFF);  // -1: every slot masked until the copy lands
  late.lens.fill_bytes(0x00);         // 0: no slot
  const size_t bytes = workspace_size(late.hca);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  testing::launch_delayed_copy(late.block_table.get(), table_source.get(), table_source.bytes(), 200000, stream);
  testing::launch_delayed_copy(late.lens.get(), lens_source.get(), lens_source.bytes(), 100000, stream);
  Status status = dsv4_decode_hca(late.hca, workspace.get(), bytes, stream);
  EXPECT_TRUE(status.ok()) << status.message();
  testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "stream");
  expect_same_bits(download(late), want, "after a late write of block_table and lens");

  // Two calls on one workspace: the second problem's table differs.
  const Dsv4HcaProblem p2 = batch_problem(seed + 1, 64, 32, 4);
  DeviceProblem other(p2);
  const DeviceResult want2 = run_hca(other);
  prepare_outputs(late);
  prepare_outputs(other);
  other.hca.enable_pdl = true;
  const size_t bytes2 = std::max(bytes, workspace_size(other.hca));
  DeviceBuffer shared = poisoned_workspace(bytes2);
  for (int i = 0; i < 2; ++i) {
    status = dsv4_decode_hca(late.hca, shared.get(), bytes2, stream);
    EXPECT_TRUE(status.ok()) << status.message();
    status = dsv4_decode_hca(other.hca, shared.get(), bytes2, stream);
    EXPECT_TRUE(status.ok()) << status.message();
  }
  testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "stream");
  DeviceResult got = download(late), got2 = download(other);
  // Each counter was added to twice.
  EXPECT_EQ(got.count, kCountStart + 2 * (want.count - kCountStart));
  EXPECT_EQ(got2.count, kCountStart + 2 * (want2.count - kCountStart));
  got.count = want.count, got2.count = want2.count;
  expect_same_bits(got, want, "the first of two calls on one workspace");
  expect_same_bits(got2, want2, "the second of two calls on one workspace");
  cudaStreamDestroy(stream);
}

// A CUDA graph captures the call (no allocation, no synchronization) and
// replays it with the same bits; new metadata between replays is read.
// Without PDL, then with it (a capture error only there: suspect the CUDA
// version's support of programmatic launches in graphs before the kernels).
TEST_F(Dsv4HcaGpu, CapturedInACudaGraph) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = batch_problem(seed, 61, 12, 4);
  Dsv4HcaProblem changed = p;
  changed.lens.assign(changed.lens.size(), 100);  // below 128: no compressed slot
  DeviceProblem changed_run(changed);
  const DeviceResult want_changed = run_hca(changed_run);

  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "with PDL" : "without PDL");
    DeviceProblem d(p);
    d.hca.enable_pdl = pdl;
    const DeviceResult want = run_hca(d);
    cudaStream_t stream = nullptr;
    testing::check_cuda(static_cast<int>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)), "stream");
    const size_t bytes = workspace_size(d.hca);
    DeviceBuffer workspace = poisoned_workspace(bytes);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    testing::check_cuda(static_cast<int>(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal)), "capture");
    const Status status = dsv4_decode_hca(d.hca, workspace.get(), bytes, stream);
    testing::check_cuda(static_cast<int>(cudaStreamEndCapture(stream, &graph)), "end capture");
    ASSERT_TRUE(status.ok()) << status.message();
    testing::check_cuda(static_cast<int>(cudaGraphInstantiate(&exec, graph, 0)), "instantiate");
    for (int replay = 0; replay < 2; ++replay) {
      prepare_outputs(d);
      testing::check_cuda(static_cast<int>(cudaGraphLaunch(exec, stream)), "replay");
      testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "replay");
      expect_same_bits(download(d), want, "graph replay");
    }
    testing::check_cuda(static_cast<int>(cudaMemcpy(d.lens.get(), changed.lens.data(), changed.lens.size() * 4,
                                                    cudaMemcpyHostToDevice)),
                        "lens");
    prepare_outputs(d);
    testing::check_cuda(static_cast<int>(cudaGraphLaunch(exec, stream)), "replay");
    testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "replay");
    expect_same_bits(download(d), want_changed, "graph replay with new lens");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
