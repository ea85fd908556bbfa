// Determinism and batch invariance of dsv4_decode_hca on the GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "gpu/dsv4_hca/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// Deterministic and batch invariant: the same bits run after run, and a
// token's bits do not depend on the batch around it (the first tokens of a
// larger batch, where kAuto picks another kernel).
TEST_F(Dsv4HcaGpu, BitwiseIdenticalOverRunsAndBatches) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem big = batch_problem(seed, 64, 240, 4);
  const auto& c = big.config;
  DeviceProblem d(big);
  const DeviceResult first = run_hca(d);
  const DeviceResult second = run_hca(d);
  expect_same_bits(first, second, "run after run");

  DeviceProblem small(big);
  small.hca.num_tokens = 4;
  small.hca.num_requests = 1;  // the first request's 4 tokens
  small.section1.num_tokens = 4;  // the same rows for run_hca's workspace check
  const DeviceResult part = run_hca(small);
  const size_t per_token = static_cast<size_t>(c.heads) * kHeadDim;
  for (size_t i = 0; i < 4 * per_token; ++i) ASSERT_EQ(part.out[i], first.out[i]) << "element " << i;
  EXPECT_EQ(std::memcmp(part.lse.data(), first.lse.data(), 4 * c.heads * sizeof(float)), 0);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
