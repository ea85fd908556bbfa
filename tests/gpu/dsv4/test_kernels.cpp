// dsv4_decode on the GPU over widths, token counts, head counts and both
// dtypes: every kernel (cluster, stream and split) against the fp64
// reference and against each other, bit for bit (checks.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "gpu/dsv4/checks.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

TEST_F(Dsv4Gpu, WidthsAndTokenCounts) {
  // 132, 644, 1092: a last chunk of 4 columns; 384: 6-CTA clusters.
  for (int32_t width : {128, 132, 192, 384, 640, 644, 1024, 1088, 1092, 2176})
    for (int64_t tokens : {1, 6, 12, 48}) check_problem(config_for(tokens, width));
}

// 100 tokens: a forced kStream runs one CTA a token (FP8: the deep kernel,
// with P V warps from 5 chunks), past the dim halves' 66 units, at the
// widths where kAuto gives it the most work: W = 128 (2 chunks) and W =
// 2176 (groups of 3 chunks); 320 and 644 for the P V warps' first width
// (an odd count of chunks, two chunk slots) and a last chunk of 4 columns.
TEST_F(Dsv4Gpu, OneCtaATokenStreamKernelAtNarrowAndWideWidths) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16})
    for (int32_t width : {128, 320, 644, 2176}) {
      Dsv4ProblemConfig config = config_for(100, width, dtype);
      config.hole_fraction = 0.1;
      SCOPED_TRACE(dtype_name(dtype));
      check_problem(config, shorten_lens_and_punch_holes);
    }
}

// H = 8 runs as 16 heads with 8 silent ones; 32..128 as groups of 16, and
// FP8 H = 64, 128 at W <= 1024 as groups of 64 (but the cluster kernel).
TEST_F(Dsv4Gpu, HeadCounts) {
  for (int32_t heads : {8, 32, 64, 128})
    for (int64_t tokens : {1, 7, 40}) {
      Dsv4ProblemConfig config = config_for(tokens, tokens == 7 ? 2176 : 640);
      config.heads = heads;
      config.hole_fraction = 0.05;
      SCOPED_TRACE("H " + std::to_string(heads));
      check_problem(config);
    }
}

// The split path's combine kernel folds with the exact group count (one
// instance for each of 2..16 groups, for each dtype and head group size)
// and gives a unit 32 CTAs at 1 or 2 units, 8 at 3: every count at each of
// those token counts, every kernel bit-compared; FP8 and BF16 at 16 heads,
// FP8 at 64 (64-head tiles). W = 64 g (g <= 16 chunks) has g groups; 1096
// has 9 groups of 2 chunks, the last chunk 8 columns.
TEST_F(Dsv4Gpu, SplitCombineAtEveryGroupCount) {
  struct Variant {
    DType dtype;
    int heads;
  };
  const Variant variants[] = {{DType::kFloat8E4M3, 16}, {DType::kBFloat16, 16}, {DType::kFloat8E4M3, 64}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(std::string(dtype_name(v.dtype)) + ", H " + std::to_string(v.heads));
    for (int32_t groups = 2; groups <= 16; ++groups) {
      for (int64_t tokens : {1, 2, 3}) {
        Dsv4ProblemConfig config = config_for(tokens, 64 * groups, v.dtype);
        config.heads = v.heads;
        check_problem(config);
      }
    }
  }
  check_problem(config_for(2, 1096));
}

TEST_F(Dsv4Gpu, WidestWidth) {  // 128 + 16384 columns: 258 chunks, 16 groups of 17
  for (int32_t width : {128 + 16384, 16500}) {
    Dsv4ProblemConfig config = config_for(5, width);
    config.compressed_rows = 32768;
    config.hole_fraction = 0.02;
    check_problem(config);
  }
}

TEST_F(Dsv4Gpu, ManyTokens) {
  check_problem(config_for(700, 640));
  check_problem(config_for(300, 2176));
}

// BF16 q and pools (1024-byte rows): widths of one chunk a CTA, a last chunk
// of 4 columns, and groups of 3 chunks (the BF16 cluster kernel's one-tile
// walk), at T of one or several cluster waves; 8 heads (silent half) and 64.
TEST_F(Dsv4Gpu, Bf16WidthsTokensAndHeads) {
  for (int32_t width : {128, 644, 2176})
    for (int64_t tokens : {1, 6, 48})
      for (int32_t heads : {16, 8, 64}) {
        Dsv4ProblemConfig config = config_for(tokens, width, DType::kBFloat16);
        config.heads = heads;
        config.hole_fraction = 0.05;
        SCOPED_TRACE("BF16, H " + std::to_string(heads));
        check_problem(config);
      }
}

TEST_F(Dsv4Gpu, Bf16WidestWidthAndManyTokens) {
  Dsv4ProblemConfig widest = config_for(5, 128 + 16384, DType::kBFloat16);
  widest.compressed_rows = 32768;
  widest.hole_fraction = 0.02;
  check_problem(widest);
  check_problem(config_for(300, 640, DType::kBFloat16));
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
