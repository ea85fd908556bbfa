// Masked columns of dsv4_decode_packed on the GPU: no lens and NaN slots,
// holes and short lens, tokens with no active column, out-of-range indices
// (masked and counted once), sinks of +-inf; kAuto and each kernel forced
// against the fp64 reference (checks.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// No SWA lens: the unfilled window columns are -1 and every other unused
// slot of both pools is NaN; no sinks.
TEST_F(Dsv4PackedGpu, NoLensNoSinksNanSlots) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  c.swa_lens = false;
  c.sinks = false;
  c.short_fraction = 0.7;
  check_config(c);
}

TEST_F(Dsv4PackedGpu, HolesAndShortLens) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 24);
  c.hole_fraction = 0.3;
  check_config(c, [](Dsv4PackedProblem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.config.seed));
    // Shorter lens only: the columns past the generated lens name NaN rows or -1.
    for (auto& len : p.extra_lens) len = static_cast<int32_t>(rng() % (len + 1));
    for (auto& len : p.swa_lens) len = static_cast<int32_t>(rng() % (len + 1));
    for (int64_t t = 0; t < p.config.tokens; t += 5) {
      for (int c = 0; c < p.config.swa_width; c += 3) p.swa_indices[t * p.swa_stride() + c] = -1;
    }
  });
}

// Lens of 0, all -1, only masked columns, lens past the width, negative lens:
// zeros and lse = -inf (sinks or not) where nothing is active.
TEST_F(Dsv4PackedGpu, TokensWithNoActiveColumn) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  const DeviceResult r = check_config(c, [](Dsv4PackedProblem& p) {
    const int64_t swa = p.swa_stride(), extra = p.extra_stride();
    p.swa_lens[0] = 0, p.extra_lens[0] = 0;
    for (int col = 0; col < p.config.swa_width; ++col) p.swa_indices[3 * swa + col] = -1;
    for (int col = 0; col < p.config.extra_width; ++col) p.extra_indices[3 * extra + col] = -1;
    p.swa_lens[7] = -5, p.extra_lens[7] = 40;
    for (int col = 0; col < 40; ++col) p.extra_indices[7 * extra + col] = -1;
    // Past the width: the width (columns past the generated lens become -1 first).
    for (int col = p.swa_lens[9]; col < p.config.swa_width; ++col) p.swa_indices[9 * swa + col] = -1;
    for (int col = p.extra_lens[9]; col < p.config.extra_width; ++col) p.extra_indices[9 * extra + col] = -1;
    p.swa_lens[9] = 1 << 30, p.extra_lens[9] = 1 << 30;
  });
  for (int64_t t : {0, 3, 7}) {
    for (int i = 0; i < c.heads * kHeadDim; ++i) ASSERT_EQ(r.out[t * c.heads * kHeadDim + i], 0) << "token " << t;
    for (int h = 0; h < c.heads; ++h) EXPECT_EQ(r.lse[t * c.heads + h], -std::numeric_limits<float>::infinity());
  }
}

// Active columns past their pool are masked like -1 and counted once (not
// once a head group); past lens they are not counted.
TEST_F(Dsv4PackedGpu, OutOfRangeIndicesAreMaskedAndCounted) {
  for (int heads : {16, 64}) {
    Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
    c.heads = heads;
    check_config(c, [](Dsv4PackedProblem& p) {
      const int64_t swa_rows = p.swa_pages * p.config.page_size, extra_rows = p.extra_pages * p.config.page_size;
      for (int64_t t = 0; t < p.config.tokens; ++t) {
        p.swa_indices[t * p.swa_stride()] = static_cast<int32_t>(swa_rows);
        p.extra_indices[t * p.extra_stride() + 3] = std::numeric_limits<int32_t>::max();
        p.extra_indices[t * p.extra_stride() + p.config.extra_width - 1] = static_cast<int32_t>(extra_rows + t);
      }
    });
  }
}

TEST_F(Dsv4PackedGpu, InfiniteSinks) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 6);
  const DeviceResult r = check_config(c, [](Dsv4PackedProblem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                   : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : 30.0f;
    }
  });
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int h = 0; h < c.heads; h += 3)
      for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(r.out[(t * c.heads + h) * kHeadDim + d] & 0x7FFF, 0);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
