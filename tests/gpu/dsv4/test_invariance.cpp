// Determinism and batch invariance of dsv4_decode: the same bits run after
// run on every kernel, and a token's bits do not depend on the batch around
// it nor on the kernel kAuto picks for that batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/dsv4/checks.h"
#include "sparse_decode/introspection.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

TEST_F(Dsv4Gpu, BitwiseIdenticalOverRepeatedRuns) {
  for (int32_t width : {640, 2176}) {
    Dsv4ProblemConfig config = config_for(12, width);
    config.hole_fraction = 0.1;
    SCOPED_TRACE("seed " + std::to_string(config.seed));
    Dsv4Problem problem = testing::make_dsv4_problem(config);
    Dsv4DeviceProblem device(problem);
    std::vector<uint16_t> first;
    for (Dsv4Kernel kernel : kKernels) {
      device.args.kernel = kernel;
      for (int run = 0; run < 100; ++run) {
        device.out.fill_bytes(static_cast<uint8_t>(run));
        ASSERT_TRUE(decode(device.args, nullptr).ok());
        std::vector<uint16_t> got = device.out.download<uint16_t>();
        if (first.empty()) first = got;
        ASSERT_EQ(std::memcmp(first.data(), got.data(), got.size() * 2), 0)
            << kernel_name(kernel) << " kernel, run " << run;
      }
    }
  }
}

// Tokens `picks` of `source`, in that order, as a problem of their own (same pools).
Dsv4Problem select_tokens(const Dsv4Problem& source, const std::vector<int64_t>& picks) {
  Dsv4Problem batch = source;
  const int64_t T = static_cast<int64_t>(picks.size());
  const size_t q_bytes = size_t(source.config.heads) * kHeadDim * source.element_bytes();
  const size_t W = source.config.width;
  batch.config.tokens = T;
  batch.q.resize(T * q_bytes);
  batch.indices.resize(T * W);
  if (!source.lens.empty()) batch.lens.resize(T);
  for (int64_t i = 0; i < T; ++i) {
    std::memcpy(&batch.q[i * q_bytes], &source.q[picks[i] * q_bytes], q_bytes);
    std::memcpy(&batch.indices[i * W], &source.indices[picks[i] * W], W * sizeof(int32_t));
    if (!source.lens.empty()) batch.lens[i] = source.lens[picks[i]];
  }
  return batch;
}

// Tracks 6 tokens of a problem of 5000 through batches of 1, 7, 64, 100 and
// 5000 (kAuto at 16 heads, H200: W 640 split for 1 and 7, the stream kernel
// in dim halves for 64, one CTA a token for 100 (FP8: the deep kernel);
// W 2176 cluster for 1 and 7, for 64 split (FP8) or the halves (BF16), the
// stream kernel for 100; the two-tile stream kernel for 5000) and expects
// their bits to stay the same. The forced kernels of check_problem cover
// the cluster kernel at W 640.
void check_batch_invariance(DType dtype, int32_t width, int32_t heads = 16) {
  Dsv4ProblemConfig config = config_for(5000, width, dtype);
  config.heads = heads;
  config.hole_fraction = 0.05;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + ", seed " + std::to_string(config.seed) + ", W " +
               std::to_string(width) + ", H " + std::to_string(heads));
  const Dsv4Problem source = testing::make_dsv4_problem(config);
  std::mt19937_64 rng(config.seed);
  const std::vector<int64_t> tracked = {0, 1, 2, 4999, 2500, 77};
  std::vector<std::vector<uint16_t>> expected(tracked.size());
  const size_t token_values = size_t(config.heads) * kHeadDim;
  for (int64_t batch_size : {1, 7, 64, 100, 5000}) {
    // Batch 1 runs each tracked token alone; larger batches hold them all at
    // random places among random other tokens.
    const int64_t runs = batch_size == 1 ? static_cast<int64_t>(tracked.size()) : 1;
    for (int64_t run = 0; run < runs; ++run) {
      std::vector<int64_t> picks(batch_size);
      for (int64_t& pick : picks) pick = static_cast<int64_t>(rng() % config.tokens);
      std::vector<int64_t> place(tracked.size(), -1);
      if (batch_size == 1) {
        picks[0] = tracked[run], place[run] = 0;
      } else {
        std::vector<int64_t> positions(batch_size);
        for (int64_t i = 0; i < batch_size; ++i) positions[i] = i;
        std::shuffle(positions.begin(), positions.end(), rng);
        for (size_t k = 0; k < tracked.size(); ++k) picks[positions[k]] = tracked[k], place[k] = positions[k];
      }
      Dsv4DeviceProblem device(select_tokens(source, picks));
      SCOPED_TRACE("batch " + std::to_string(batch_size) + " on the " +
                   kernel_name(dsv4_chosen_kernel(device.args)) + " kernel");
      device.out.fill_bytes(kPoisonByte);
      ASSERT_TRUE(decode(device.args, nullptr).ok());
      const std::vector<uint16_t> out = device.out.download<uint16_t>();
      for (size_t k = 0; k < tracked.size(); ++k) {
        if (place[k] < 0) continue;
        const std::vector<uint16_t> got(out.begin() + place[k] * token_values,
                                        out.begin() + (place[k] + 1) * token_values);
        if (expected[k].empty()) {
          expected[k] = got;
        } else {
          EXPECT_EQ(got, expected[k]) << "token " << tracked[k] << " changed bits";
        }
      }
    }
  }
}

// A token's output has the same bits whatever the batch around it and
// whichever kernel dsv4_decode picks for that batch size.
TEST_F(Dsv4Gpu, BatchInvariance) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    for (int32_t width : {640, 2176}) check_batch_invariance(dtype, width);
    check_batch_invariance(dtype, 644, 32);
  }
}

// H = 64: at W = 640 kAuto picks the 64-head split path (batches
// of 1, 7) or the 64-head stream kernel (64: in dim halves on an H200; 100,
// 5000: a CTA a unit), never the 16-head cluster kernel; at W = 2176 the
// 16-head kernels, the cluster kernel included.
TEST_F(Dsv4Gpu, BatchInvarianceHeads64) {
  for (int32_t width : {640, 2176}) check_batch_invariance(DType::kFloat8E4M3, width, 64);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
