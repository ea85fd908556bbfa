// dsv4_decode among other work on a stream: with PDL each kernel reads its
// inputs only after the kernel that writes them has finished.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu/dsv4/checks.h"
#include "support/delayed_copy.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

// With PDL the decode may start while the previous kernel still writes its
// query: what it reads after the grid-dependency wait must be the new values.
// The previous kernel releases its dependents at once and writes q ~200 us
// later (the kernel before it writes the indices).
TEST_F(Dsv4Gpu, PdlWaitsForTheKernelThatWritesTheInputs) {
  for (Dsv4Kernel kernel : kKernels) {
    SCOPED_TRACE(kernel_name(kernel));
    Dsv4ProblemConfig config = config_for(kernel == Dsv4Kernel::kCluster ? 12 : 300, 640);
    Dsv4Problem problem = testing::make_dsv4_problem(config);
    Dsv4DeviceProblem device(problem);
    // The device buffers first hold another problem's query and indices.
    Dsv4ProblemConfig stale_config = config;
    stale_config.seed = config.seed + 1;
    const Dsv4Problem stale = testing::make_dsv4_problem(stale_config);
    DeviceBuffer fresh_q(problem.q), fresh_indices(problem.indices);
    cudaMemcpy(device.q.get(), stale.q.data(), stale.q.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(device.indices.get(), stale.indices.data(), stale.indices.size() * 4, cudaMemcpyHostToDevice);
    Dsv4DecodeArgs args = device.args;
    args.kernel = kernel;
    args.enable_pdl = true;
    const size_t workspace_bytes = workspace_size(args);
    void* workspace = workspace_of(workspace_bytes);  // allocated before the delayed copies start
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    device.out.fill_bytes(kPoisonByte);
    device.out_of_range_count.fill_bytes(0);
    testing::launch_delayed_copy(device.indices.get(), fresh_indices.get(), fresh_indices.bytes(), 0, stream);
    testing::launch_delayed_copy(device.q.get(), fresh_q.get(), fresh_q.bytes(), 200000, stream);
    ASSERT_TRUE(dsv4_decode(args, workspace, workspace_bytes, stream).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaStreamDestroy(stream);
    // The same call again, everything in place, is the expected output.
    const std::vector<uint16_t> got = device.out.download<uint16_t>();
    const Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
    expect_matches(run_and_compare(args, host, device.out, device.lse));
    EXPECT_EQ(got, device.out.download<uint16_t>()) << "the PDL launch read inputs before they were written";
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
