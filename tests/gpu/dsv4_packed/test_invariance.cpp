// Determinism and batch invariance of dsv4_decode_packed on the GPU, each
// kernel forced.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// Each kernel, forced: the same bits run after run, and a token alone gives
// the bits it gets in the batch (the cluster kernel: while the plan is the
// same; the stream kernel serves each (token, head group) with one CTA).
TEST_P(Dsv4PackedGpuKernels, BitwiseIdenticalOverRunsAndBatches) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  c.hole_fraction = 0.1;
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  const DeviceResult first = run_device(device);
  for (int run = 0; run < 20; ++run) {
    device.out.fill_bytes(static_cast<uint8_t>(run));
    ASSERT_TRUE(device.decode(device.args).ok());
    ASSERT_TRUE(device.out.download<uint16_t>() == first.out) << "run " << run;
  }
  const size_t row = static_cast<size_t>(c.heads) * kHeadDim;
  for (int64_t t : {0, 5, 11}) {
    Dsv4PackedDecodeArgs one = device.args;
    one.num_tokens = 1;
    one.q = static_cast<const uint16_t*>(one.q) + t * one.q_token_stride;
    one.swa.indices += t * one.swa.indices_stride;
    one.swa.lens += t;
    one.extra.indices += t * one.extra.indices_stride;
    one.extra.lens += t;
    one.out = static_cast<uint16_t*>(one.out) + t * one.out_token_stride;
    one.lse += t * one.lse_token_stride;
    device.out.fill_bytes(kPoisonByte);
    ASSERT_TRUE(device.decode(one).ok());
    const std::vector<uint16_t> got = device.out.download<uint16_t>();
    EXPECT_EQ(std::memcmp(&got[t * row], &first.out[t * row], row * 2), 0) << "token " << t << " alone";
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
