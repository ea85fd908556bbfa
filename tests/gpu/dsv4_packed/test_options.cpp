// The optional arguments of dsv4_decode_packed on the GPU: a page size and
// gap for each segment, PDL without lse or counter, strided q, out and lse.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// Each segment with its own page size and gap: a kernel that read the extra
// pool with the SWA pool's geometry would fail.
TEST_F(Dsv4PackedGpu, SegmentsWithTheirOwnPageGeometry) {
  const uint64_t seed = test::fresh_seed();
  const int64_t geometries[][4] = {{64, 0, 61, 48}, {1, 16, 256, 0}, {256, 32, 2, 80}};  // swa size, gap, extra size, gap
  for (const auto& g : geometries) {
    Dsv4PackedProblemConfig c = config_for(seed + g[0] * 7 + g[2], 13, 512, g[0]);
    c.page_gap = g[1];
    c.extra_page_size = g[2];
    c.extra_page_gap = g[3];
    check_config(c);
  }
}

// Gaps between pages, of both segments.
TEST_F(Dsv4PackedGpu, PageGaps) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t page_size : {1, 61}) {
    Dsv4PackedProblemConfig c = config_for(seed + page_size, 6, 512, page_size);
    c.page_gap = 48;
    check_config(c);
  }
}

TEST_P(Dsv4PackedGpuKernels, WithPdlAndWithoutLseOrCounter) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  const DeviceResult full = run_device(device);
  device.args.enable_pdl = true;
  device.args.lse = nullptr;
  device.args.out_of_range_count = nullptr;
  const DeviceResult lean = run_device(device);
  EXPECT_TRUE(lean.out == full.out);
  EXPECT_EQ(lean.count, kCountStart);
  const std::vector<uint32_t> poison(lean.lse.size(), 0xFFFFFFFFu);
  EXPECT_EQ(std::memcmp(lean.lse.data(), poison.data(), poison.size() * 4), 0) << "lse written without lse";
}

// Strided q, out and lse: the padding between heads and tokens is never written.
TEST_P(Dsv4PackedGpuKernels, StridedQueryAndOutput) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 6);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  const int H = c.heads;
  const int64_t q_head = 1024, q_token = 20000, out_head = 640, out_token = H * 640 + 64, lse_token = 24;
  std::vector<uint16_t> q(static_cast<size_t>(c.tokens) * q_token, 0x7FC0);
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int h = 0; h < H; ++h)
      std::memcpy(&q[t * q_token + h * q_head], &problem.q[(t * H + h) * kHeadDim], kHeadDim * 2);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  DeviceBuffer q_device(q), out(static_cast<size_t>(c.tokens) * out_token * 2), lse(c.tokens * lse_token * 4);
  Dsv4PackedDecodeArgs args = device.args;
  args.q = q_device.get();
  args.q_token_stride = q_token;
  args.q_head_stride = q_head;
  args.out = out.get();
  args.out_token_stride = out_token;
  args.out_head_stride = out_head;
  args.lse = lse.as<float>();
  args.lse_token_stride = lse_token;
  out.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  ASSERT_TRUE(device.decode(args).ok());
  const std::vector<uint16_t> got = out.download<uint16_t>();
  const std::vector<float> got_lse = lse.download<float>();
  const DeviceResult contiguous = run_device(device);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      ASSERT_EQ(std::memcmp(&got[t * out_token + h * out_head], &contiguous.out[(t * H + h) * kHeadDim], kHeadDim * 2),
                0);
      for (int d = kHeadDim; d < out_head && h * out_head + d < out_token; ++d)
        ASSERT_EQ(got[t * out_token + h * out_head + d], 0xFFFF);
      EXPECT_EQ(got_lse[t * lse_token + h], contiguous.lse[t * H + h]);
    }
    for (int64_t e = int64_t{H} * out_head; e < out_token; ++e) ASSERT_EQ(got[t * out_token + e], 0xFFFF);
    for (int h = H; h < lse_token; ++h) {
      uint32_t bits;
      std::memcpy(&bits, &got_lse[t * lse_token + h], 4);
      ASSERT_EQ(bits, 0xFFFFFFFFu) << "lse padding written";
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
