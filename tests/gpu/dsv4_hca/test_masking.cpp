// Masked slots of dsv4_decode_hca on the GPU, on each page size: window
// lengths, lens below 128 and past the footprint, empty tokens, negative and
// out-of-range ids (counted), sinks of +-inf.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "gpu/dsv4_hca/checks.h"
#include "support/dsv4_hca_checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

// Edge cases on each page size.

class Dsv4HcaGpuEdge : public test::HcaEdgeFixture<Dsv4HcaGpu>, public ::testing::WithParamInterface<int64_t> {
 protected:
  void SetUp() override {
    Dsv4HcaGpu::SetUp();
    if (!IsSkipped()) start(small_config(seed_, GetParam()));
  }
};

// swa_lens 0, 128, below 0 and past 128 (clamped), and a random one below 128.
TEST_P(Dsv4HcaGpuEdge, WindowLengths) {
  SCOPED_TRACE(test::seed_message(seed_));
  for (int32_t window : {0, 128, -5, 1000, 37}) {
    SCOPED_TRACE(::testing::Message() << "swa_lens = " << window);
    Dsv4HcaProblem p = problem_;
    p.set_window(window, rng_());
    check_problem(p);
  }
}

// lens below 128 (negative too): no compressed slot; then swa_lens 0 too:
// nothing active, zeros and lse -inf (with sinks).
TEST_P(Dsv4HcaGpuEdge, LensBelow128AndEmptyTokens) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  for (int64_t t = 0; t < p.config.tokens; ++t) p.lens[t] = static_cast<int32_t>(rng_() % 129) - 1;
  check_problem(p);
  for (auto& w : p.swa_lens) w = 0;
  ASSERT_FALSE(p.sinks.empty());
  const DeviceResult r = check_problem(p);
  for (uint16_t bits : r.out) ASSERT_EQ(bits & 0x7FFF, 0) << "an empty token's output is not zero";
  for (float l : r.lse) ASSERT_TRUE(std::isinf(l) && l < 0) << "an empty token's lse is " << l;
}

// lens past the footprint and INT32_MAX: hca_seq_lens and the table's capacity bound the slots.
TEST_P(Dsv4HcaGpuEdge, LensPastTheFootprint) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  p.make_table_live(rng_());
  p.lens.assign(p.lens.size(), INT32_MAX);
  check_problem(p);
  p.hca_seq_lens.assign(p.hca_seq_lens.size(), INT32_MAX);
  check_problem(p);
}

// Negative pages and window rows are masked; pages and rows past their pool
// (INT32_MAX too: page * page_size overflows int32) are masked and counted.
TEST_P(Dsv4HcaGpuEdge, OutOfRangeAndNegativeIds) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  const int64_t expected = test::break_active_ids(p, rng_);
  EXPECT_GT(expected, 0);
  const DeviceResult r = check_problem(p);
  EXPECT_EQ(r.count, kCountStart + expected);
}

// Sinks +inf (zeros, lse unchanged), -inf (as no sink), none.
TEST_P(Dsv4HcaGpuEdge, Sinks) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  p.sinks.assign(p.config.heads, INFINITY);
  const DeviceResult plus = check_problem(p);
  p.sinks.assign(p.config.heads, -INFINITY);
  const DeviceResult minus = check_problem(p);
  p.sinks.clear();
  const DeviceResult none = check_problem(p);
  expect_same_bits(minus, none, "sink -inf vs no sink");
  for (uint16_t bits : plus.out) ASSERT_EQ(bits & 0x7FFF, 0);
  EXPECT_EQ(std::memcmp(plus.lse.data(), none.lse.data(), none.lse.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaGpuEdge, ::testing::ValuesIn(kPageSizes),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
