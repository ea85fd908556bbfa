// dsv4_decode_packed among other work on a stream: with PDL each kernel reads
// its inputs only after the kernel that writes them has finished.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu/dsv4_packed/checks.h"
#include "support/delayed_copy.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// With PDL the kernel may start while the previous kernel still writes q
// (it releases its dependents first and writes ~200 us later): q, indices
// and lens must be read after the grid-dependency wait.
TEST_P(Dsv4PackedGpuKernels, PdlWaitsForTheKernelThatWritesTheQuery) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  const DeviceResult expected = run_device(device);
  Dsv4PackedProblemConfig stale_config = c;
  stale_config.seed = c.seed + 1;
  const Dsv4PackedProblem stale = testing::make_dsv4_packed_problem(stale_config);
  DeviceBuffer fresh_q(problem.q);
  cudaMemcpy(device.q.get(), stale.q.data(), stale.q.size() * 2, cudaMemcpyHostToDevice);
  device.out.fill_bytes(kPoisonByte);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  testing::launch_delayed_copy(device.q.get(), fresh_q.get(), fresh_q.bytes(), 200000, stream);
  device.args.enable_pdl = true;
  ASSERT_TRUE(device.decode(device.args, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  EXPECT_TRUE(device.out.download<uint16_t>() == expected.out) << "the PDL launch read q before it was written";
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
