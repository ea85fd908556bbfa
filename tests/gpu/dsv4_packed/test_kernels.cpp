// dsv4_decode_packed on the GPU over page sizes, token and head counts,
// segment widths, the UE8M0 scale range, query magnitudes and the stream
// pair's halves: kAuto and each kernel forced against the fp64 reference
// (checks.h). Instantiates the once-a-kernel tests of this folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>

#include "gpu/dsv4_packed/checks.h"
#include "reference/formats.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

TEST_F(Dsv4PackedGpu, PageSizesTokenCountsAndWidths) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t page_size : {1, 2, 61, 64, 256})
    for (int32_t extra_width : {512, 0})
      for (int64_t tokens : {1, 6, 13}) check_config(config_for(seed + tokens, tokens, extra_width, page_size));
}

// The plan shrinks the clusters as T grows (packed_plan): 48 tokens run
// 5-CTA clusters, 130 tokens 2-CTA ones, 300 tokens one CTA a token; the
// wide segments at 140 tokens walk 68 chunks in one CTA.
TEST_F(Dsv4PackedGpu, LargerTokenCounts) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t tokens : {48, 130, 300}) check_config(config_for(seed + tokens, tokens));
  Dsv4PackedProblemConfig wide = config_for(seed + 1, 140, 4096);
  wide.swa_width = 256;
  check_config(wide);
}

// Batches of more (token, head group) units than one wave of stream-kernel
// CTAs holds (264), with several head groups and 8 padded heads, holes and
// short lens.
TEST_F(Dsv4PackedGpu, ManyUnitsACta) {
  const uint64_t seed = test::fresh_seed();
  struct Case {
    int heads;
    int64_t tokens;
    int32_t extra_width;
  };
  for (const Case& k : {Case{64, 160, 512}, Case{8, 700, 0}, Case{16, 600, 128}}) {
    Dsv4PackedProblemConfig c = config_for(seed + k.heads, k.tokens, k.extra_width);
    c.heads = k.heads;
    c.hole_fraction = 0.1;
    check_config(c);
  }
}

TEST_F(Dsv4PackedGpu, OtherHeadCounts) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {8, 32, 64, 128}) {
    Dsv4PackedProblemConfig c = config_for(seed + heads, 5);
    c.heads = heads;
    check_config(c);
  }
}

// Widths that are not multiples of 64 and wide segments: a CTA walks several chunks.
TEST_F(Dsv4PackedGpu, OddAndWideSegments) {
  const uint64_t seed = test::fresh_seed();
  // {128, 896}: 16 chunks, the largest cluster; {64, 0}: one chunk, a cluster of one CTA.
  const int32_t widths[][2] = {{130, 1024}, {1, 1}, {64, 2048}, {256, 4096}, {77, 0}, {128, 896}, {64, 0}};
  for (const auto& w : widths) {
    Dsv4PackedProblemConfig c = config_for(seed + w[1], 6, w[1]);
    c.swa_width = w[0];
    c.extra_rows = std::max<int64_t>(8192, 2 * w[1]);
    check_config(c);
  }
}

// Scale bytes over 100..150 and the extremes 0, 2, 15, 150, 160 in a fifth
// of the tiles: values from 2^-136 to 2^42. The extremes below 2^-126 are
// BF16 subnormals in the output too, so groups are compared over all rows.
TEST_F(Dsv4PackedGpu, ScaleBytesAcrossTheUe8m0Range) {
  const uint64_t seed = test::fresh_seed();
  for (int range : {0, 1}) {
    Dsv4PackedProblemConfig c = config_for(seed + range, 12);
    c.scale_min = range ? 100 : 112;
    c.scale_max = range ? 150 : 132;
    c.extreme_fraction = range ? 0.2 : 0.0;
    check_config(c, {}, range ? GroupCheck::kOverRows : GroupCheck::kEachRow);
  }
}

// Heads whose FP8 dims are 2^100 below their BF16 dims, or 2^40 above: the
// stream kernel's q shift (FP16 range) must not overflow the BF16 dims or
// lose the FP8 ones.
TEST_F(Dsv4PackedGpu, QueryDimsOfVeryDifferentMagnitudes) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  check_config(c, [](Dsv4PackedProblem& p) {
    const int H = p.config.heads;
    for (int64_t t = 0; t < p.config.tokens; ++t)
      for (int h = 0; h < H; ++h) {
        if (h % 4 > 1) continue;
        const float factor = h % 4 == 0 ? 0x1p-100f : 0x1p40f;
        uint16_t* q = &p.q[(t * H + h) * kHeadDim];
        for (int d = 0; d < kPackedFp8Dims; ++d) {
          uint32_t bits = uint32_t{q[d]} << 16;
          float value;
          std::memcpy(&value, &bits, 4);
          value *= factor;  // exact: a power of two, within BF16's range
          std::memcpy(&bits, &value, 4);
          q[d] = static_cast<uint16_t>(bits >> 16);
        }
      }
  });
}

// The stream pair (two CTAs a unit, each walking half of a token's chunks):
// a second half with no active column (extra lens <= 150 leave chunks 5..9
// empty), an SWA-only token of 4 chunks (2 + 2), and 3 chunks (2 + 1).
TEST_F(Dsv4PackedGpu, StreamPairHalves) {
  const uint64_t seed = test::fresh_seed();
  Dsv4PackedProblemConfig empty_half = config_for(seed, 24);
  empty_half.hole_fraction = 0.1;
  check_config(empty_half, [](Dsv4PackedProblem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.config.seed));
    for (auto& len : p.extra_lens) len = std::min<int32_t>(len, static_cast<int32_t>(rng() % 151));
  });
  Dsv4PackedProblemConfig swa_only = config_for(seed + 1, 24, 0);
  swa_only.swa_width = 256;
  check_config(swa_only);
  Dsv4PackedProblemConfig three_chunks = config_for(seed + 2, 24, 64);
  check_config(three_chunks);
}

// The pair's halves far apart: tile 0 of the first half's rows is scaled by
// 2^74 (scale exponent ~66) and of the second half's by 2^-54 (~-62). q is
// only dim 448, 1 + 0.25 (head % 4): for heads with q = 1 the first half's
// scores are ~125.7 (log2) below the second's and both halves carry a share
// of dims 0..63 of the same order; for the others the first half's weight
// is 0. A fold that took the common exponent from the larger one alone (not the
// larger weighted share) flushed the second half's share for every head.
TEST_F(Dsv4PackedGpu, StreamPairHalvesOfFarApartScales) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 24);
  check_config(c, [](Dsv4PackedProblem& p) {
    std::mt19937_64 rng(p.config.seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    // q: only dim 448 (a BF16 dim), so the scores are the rows' dim 448.
    std::fill(p.q.begin(), p.q.end(), uint16_t{0});
    for (int64_t i = 0; i < p.config.tokens * p.config.heads; ++i) {
      p.q[i * kHeadDim + kPackedFp8Dims] = reference::encode_bf16(1.0 + 0.25 * (i % 4));
    }
    p.softmax_scale = 1.0f;
    // 10 chunks: the pair's first CTA walks the SWA chunks (emptied) and
    // extra columns 0..191, the second extra columns 192..511.
    for (auto& len : p.swa_lens) len = 0;
    const PackedPool pool{p.extra_pool.data(), p.extra_pages, p.extra_page_size(), p.extra_page_stride()};
    for (int64_t t = 0; t < p.config.tokens; ++t) {
      p.extra_lens[t] = p.config.extra_width;
      for (int col = 0; col < p.config.extra_width; ++col) p.extra_indices[t * p.extra_stride() + col] = col;
    }
    for (int row = 0; row < p.config.extra_width; ++row) {
      const bool first_half = row < 192;
      double values[kHeadDim];
      for (int d = 0; d < kHeadDim; ++d) values[d] = uniform(rng);
      for (int d = 0; d < kPackedTileDims; ++d) values[d] *= first_half ? 0x1p74 : 0x1p-54;
      // BF16 rounds 87.25 + k/8 to 87..88: a gap of ~125.7 (log2) at q = 1, the weight a normal float.
      values[kPackedFp8Dims] = (first_half ? 0.0 : 87.25) + 0.125 * (row % 8);
      testing::quantize_packed_row(values, const_cast<uint8_t*>(reference::packed_row_data(pool, row)),
                          const_cast<uint8_t*>(reference::packed_row_scales(pool, row)));
    }
  });
}

// Every Dsv4PackedGpuKernels test (test_options.cpp, test_streams.cpp,
// test_invariance.cpp) runs on each kernel.
INSTANTIATE_TEST_SUITE_P(EveryKernel, Dsv4PackedGpuKernels,
                         ::testing::Values(Dsv4PackedKernel::kCluster, Dsv4PackedKernel::kStream, Dsv4PackedKernel::kSplit),
                         [](const ::testing::TestParamInfo<Dsv4PackedKernel>& info) {
                           return info.param == Dsv4PackedKernel::kCluster  ? "Cluster"
                                  : info.param == Dsv4PackedKernel::kStream ? "Stream"
                                                                      : "Split";
                         });

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
