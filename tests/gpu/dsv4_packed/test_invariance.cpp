// Determinism and batch invariance of dsv4_decode_packed on the GPU: each
// kernel forced, and the batch_invariant flag at every head count.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
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

// Tokens [first, first + count) of `all` as a call of their own: the same
// rows of q, indices, lens, out and lse.
Dsv4PackedDecodeArgs sub_batch(const Dsv4PackedDecodeArgs& all, int64_t first, int64_t count) {
  Dsv4PackedDecodeArgs a = all;
  a.num_tokens = count;
  a.q = static_cast<const uint16_t*>(all.q) + first * all.q_token_stride;
  a.swa.indices += first * all.swa.indices_stride;
  if (a.swa.lens) a.swa.lens += first;
  a.extra.indices += first * all.extra.indices_stride;
  a.extra.lens += first;
  a.out = static_cast<uint16_t*>(all.out) + first * all.out_token_stride;
  if (a.lse) a.lse += first * all.lse_token_stride;
  return a;
}

// With batch_invariant, tracked tokens of a problem of 5000 keep their
// output and lse bits through batches of 1, 7, 100 and 5000 around them
// (each at another place in each batch), at 16, 64 and 128 heads, with
// kAuto, a forced kStream and (64 and 128 heads) a forced kStreamH64.
TEST_F(Dsv4PackedGpu, BatchInvariantFlagKeepsTokenBitsAtEveryBatch) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {16, 64, 128}) {
    Dsv4PackedProblemConfig c = config_for(seed + static_cast<uint64_t>(heads), 5000);
    c.heads = heads;
    c.hole_fraction = 0.05;
    Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
    PackedDeviceProblem device(problem);
    std::vector<Dsv4PackedKernel> kernels = {Dsv4PackedKernel::kAuto, Dsv4PackedKernel::kStream};
    if (heads >= 64) kernels.push_back(Dsv4PackedKernel::kStreamH64);
    const int64_t out_stride = device.args.out_token_stride, lse_stride = device.args.lse_token_stride;
    ASSERT_NE(device.args.lse, nullptr);
    for (Dsv4PackedKernel kernel : kernels) {
      SCOPED_TRACE("H " + std::to_string(heads) + ", kernel " + std::to_string(static_cast<int>(kernel)));
      Dsv4PackedDecodeArgs all = device.args;
      all.batch_invariant = true;
      all.kernel = kernel;
      const int64_t tracked[] = {0, 3, 2500, 4999};
      std::vector<std::vector<uint16_t>> out_bits(std::size(tracked));
      std::vector<std::vector<float>> lse_bits(std::size(tracked));
      for (int64_t batch : {1, 7, 100, 5000}) {
        for (size_t k = 0; k < std::size(tracked); ++k) {
          // The batch holds the token at another offset for each size. Only
          // the tracked token's rows are poisoned and read back: 5000 tokens
          // of 128 heads are 655 MB of output.
          const int64_t first = std::clamp<int64_t>(tracked[k] - batch / 3, 0, c.tokens - batch);
          uint16_t* out_row = device.out.as<uint16_t>() + tracked[k] * out_stride;
          float* lse_row = device.lse.as<float>() + tracked[k] * lse_stride;
          const size_t out_bytes = size_t(heads) * kHeadDim * 2, lse_bytes = size_t(heads) * 4;
          testing::check_cuda(static_cast<int>(cudaMemset(out_row, kPoisonByte, out_bytes)), "poison out");
          testing::check_cuda(static_cast<int>(cudaMemset(lse_row, kPoisonByte, lse_bytes)), "poison lse");
          ASSERT_TRUE(device.decode(sub_batch(all, first, batch)).ok()) << "batch " << batch;
          std::vector<uint16_t> out(size_t(heads) * kHeadDim);
          std::vector<float> lse(heads);
          testing::check_cuda(static_cast<int>(cudaMemcpy(out.data(), out_row, out_bytes, cudaMemcpyDeviceToHost)),
                              "download out");
          testing::check_cuda(static_cast<int>(cudaMemcpy(lse.data(), lse_row, lse_bytes, cudaMemcpyDeviceToHost)),
                              "download lse");
          if (out_bits[k].empty()) {
            EXPECT_TRUE(std::none_of(out.begin(), out.end(), [](uint16_t v) { return v == 0xFFFF; }))
                << "token " << tracked[k] << " alone: out not written";
            out_bits[k] = out, lse_bits[k] = lse;
            continue;
          }
          EXPECT_TRUE(out == out_bits[k]) << "token " << tracked[k] << " in a batch of " << batch;
          EXPECT_EQ(std::memcmp(lse.data(), lse_bits[k].data(), lse_bytes), 0)
              << "token " << tracked[k] << "'s lse in a batch of " << batch;
        }
      }
    }
  }
}

// The flag's path against the reference at small batches, where kAuto
// would otherwise take the split path, the cluster kernel or the pair.
TEST_F(Dsv4PackedGpu, BatchInvariantFlagMatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int64_t tokens : {1, 7, 12, 40}) {
    for (int heads : {16, 64}) {
      Dsv4PackedProblemConfig c = config_for(seed + static_cast<uint64_t>(tokens * heads), tokens);
      c.heads = heads;
      Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
      PackedDeviceProblem device(problem);
      device.args.batch_invariant = true;
      SCOPED_TRACE("T " + std::to_string(tokens) + ", H " + std::to_string(heads));
      check_against_reference(problem, device);
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
