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
  if (a.swa.lens) a.swa.lens += first * all.swa.lens_token_stride;
  a.extra.indices += first * all.extra.indices_stride;
  a.extra.lens += first * all.extra.lens_token_stride;
  a.out = static_cast<uint16_t*>(all.out) + first * all.out_token_stride;
  if (a.lse) a.lse += first * all.lse_token_stride;
  return a;
}

// With batch_invariant, tracked tokens of a problem of 5000 keep their
// output and lse bits through batches of 1, 7, 100 and 5000 around them
// (each at another place in each batch), at 16, 64 and 128 heads, with
// kAuto and (64 and 128 heads) a forced kStreamH64, without a workspace;
// a forced kStream gives kAuto's bits. Only the tracked rows are poisoned
// and read back: 5000 tokens of 128 heads are 655 MB of output.
TEST_F(Dsv4PackedGpu, BatchInvariantFlagKeepsTokenBitsAtEveryBatch) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const int64_t tracked[] = {0, 3, 2500, 4999};
  for (int heads : {16, 64, 128}) {
    Dsv4PackedProblemConfig c = config_for(seed + static_cast<uint64_t>(heads), 5000);
    c.heads = heads;
    c.hole_fraction = 0.05;
    Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
    testing::Dsv4PackedDeviceProblem device(problem);
    ASSERT_NE(device.args.lse, nullptr);
    const size_t out_bytes = size_t(heads) * kHeadDim * 2, lse_bytes = size_t(heads) * 4;
    auto out_row = [&](int64_t t) { return device.out.as<uint8_t>() + t * device.args.out_token_stride * 2; };
    auto lse_row = [&](int64_t t) { return device.lse.as<uint8_t>() + t * device.args.lse_token_stride * 4; };
    // Runs tokens [first, first + batch) and reads back the tracked rows inside.
    auto run = [&](const Dsv4PackedDecodeArgs& all, int64_t first, int64_t batch,
                   std::vector<std::vector<uint8_t>>& rows) {
      for (size_t k = 0; k < std::size(tracked); ++k) {
        if (tracked[k] < first || tracked[k] >= first + batch) continue;
        testing::check_cuda(static_cast<int>(cudaMemset(out_row(tracked[k]), kPoisonByte, out_bytes)), "poison");
        testing::check_cuda(static_cast<int>(cudaMemset(lse_row(tracked[k]), kPoisonByte, lse_bytes)), "poison");
      }
      const Status status = dsv4_decode_packed(sub_batch(all, first, batch), nullptr, 0, nullptr);
      ASSERT_TRUE(status.ok()) << status.message();
      for (size_t k = 0; k < std::size(tracked); ++k) {
        if (tracked[k] < first || tracked[k] >= first + batch) continue;
        rows[k].resize(out_bytes + lse_bytes);
        testing::check_cuda(static_cast<int>(cudaMemcpy(rows[k].data(), out_row(tracked[k]), out_bytes,
                                                        cudaMemcpyDeviceToHost)),
                            "download out");
        testing::check_cuda(static_cast<int>(cudaMemcpy(rows[k].data() + out_bytes, lse_row(tracked[k]), lse_bytes,
                                                        cudaMemcpyDeviceToHost)),
                            "download lse");
      }
    };
    std::vector<Dsv4PackedKernel> kernels = {Dsv4PackedKernel::kAuto};
    if (heads >= 64) kernels.push_back(Dsv4PackedKernel::kStreamH64);
    for (Dsv4PackedKernel kernel : kernels) {
      SCOPED_TRACE("H " + std::to_string(heads) + ", kernel " + std::to_string(static_cast<int>(kernel)));
      Dsv4PackedDecodeArgs all = device.args;
      all.batch_invariant = true;
      all.kernel = kernel;
      std::vector<std::vector<uint8_t>> alone(std::size(tracked));
      for (size_t k = 0; k < std::size(tracked); ++k) run(all, tracked[k], 1, alone);
      for (size_t k = 0; k < std::size(tracked); ++k) {
        ASSERT_EQ(alone[k].size(), out_bytes + lse_bytes);
        const uint16_t* out = reinterpret_cast<const uint16_t*>(alone[k].data());
        EXPECT_TRUE(std::none_of(out, out + heads * kHeadDim, [](uint16_t v) { return v == 0xFFFF; }))
            << "token " << tracked[k] << " alone: out not written";
        const uint32_t* lse = reinterpret_cast<const uint32_t*>(alone[k].data() + out_bytes);
        EXPECT_TRUE(std::none_of(lse, lse + heads, [](uint32_t w) { return w == 0xFFFFFFFFu; }))
            << "token " << tracked[k] << " alone: lse not written";
      }
      for (int64_t batch : {7, 100, 5000}) {
        // Each tracked token at another offset of its batch; batches that hold several run once.
        std::vector<std::vector<uint8_t>> got(std::size(tracked));
        for (size_t k = 0; k < std::size(tracked); ++k) {
          const int64_t first = std::clamp<int64_t>(tracked[k] - batch / 3, 0, c.tokens - batch);
          if (got[k].empty()) run(all, first, batch, got);
        }
        for (size_t k = 0; k < std::size(tracked); ++k) {
          EXPECT_TRUE(got[k] == alone[k]) << "token " << tracked[k] << " in a batch of " << batch;
        }
      }
      if (kernel == Dsv4PackedKernel::kAuto) {
        all.kernel = Dsv4PackedKernel::kStream;
        std::vector<std::vector<uint8_t>> forced(std::size(tracked));
        run(all, 0, 7, forced);
        EXPECT_TRUE(forced[0] == alone[0] && forced[1] == alone[1]) << "a forced kStream differs from kAuto";
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
