// Masked columns on the GPU: holes, short lens, tokens with no active
// column, out-of-range indices (masked and counted), sinks of +-inf, at 16
// and 64-head tiles and on BF16 rows; every kernel against the fp64
// reference and bit for bit (checks.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "gpu/dsv4/checks.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

// Tokens 0, 3 and 7 (of 12) end up with no active column: lens = 0, all -1,
// and only masked SWA columns.
void empty_three_tokens(Dsv4Problem& p) {
  p.lens[0] = 0;
  for (int c = 0; c < p.config.width; ++c) p.indices[3 * p.config.width + c] = -1;
  p.lens[7] = 64;
  for (int c = 0; c < 64; ++c) p.indices[7 * p.config.width + c] = -1;
}

// In every token: the first row past the SWA pool, INT32_MAX, and a row past
// the compressed pool (needs lens = W so that the columns are listed).
void add_out_of_range_indices(Dsv4Problem& p) {
  const int W = p.config.width;
  for (int64_t t = 0; t < p.config.tokens; ++t) {
    p.indices[t * W + 5] = static_cast<int32_t>(p.config.swa_rows);
    p.indices[t * W + 200] = std::numeric_limits<int32_t>::max();
    p.indices[t * W + W - 1] = static_cast<int32_t>(p.config.compressed_rows + t);
  }
}

// The masking cases of the FP8 tests, on BF16 rows.
TEST_F(Dsv4Gpu, Bf16MaskedColumnsSinksAndPages) {
  Dsv4ProblemConfig holes = config_for(48, 640, DType::kBFloat16);
  holes.hole_fraction = 0.3;
  check_problem(holes, shorten_lens_and_punch_holes);
  check_problem(config_for(12, 2176, DType::kBFloat16), empty_three_tokens);
  Dsv4ProblemConfig out_of_range = config_for(12, 640, DType::kBFloat16);
  out_of_range.lens = false;
  out_of_range.heads = 32;
  check_problem(out_of_range, add_out_of_range_indices);
  check_problem(config_for(6, 640, DType::kBFloat16), [](Dsv4Problem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                   : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : 30.0f;
    }
  });
  for (int64_t page_size : {1, 61}) check_paged_pools_with_gaps(page_size, DType::kBFloat16);
  check_four_varlen_requests(DType::kBFloat16, true);
}

TEST_F(Dsv4Gpu, NoSinksNoLens) {
  Dsv4ProblemConfig config = config_for(12, 640);
  config.sinks = false;
  config.lens = false;
  check_problem(config);
}

TEST_F(Dsv4Gpu, InfiniteSinks) {
  Dsv4ProblemConfig config = config_for(6, 640);
  check_problem(config, [](Dsv4Problem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                   : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : 30.0f;
    }
  });
}

// The forced stream kernel: in dim halves at 48 tokens, the deep kernel at
// 100 (at most one unit per two SMs, at most one an SM on the H200).
TEST_F(Dsv4Gpu, HolesAndShortLens) {
  for (int64_t tokens : {48, 100}) {
    Dsv4ProblemConfig config = config_for(tokens, 640);
    config.hole_fraction = 0.3;
    check_problem(config, shorten_lens_and_punch_holes);
  }
}

// Beyond one token an SM (132 on the H200) the forced stream kernel is the
// two-tile one with 2 CTAs an SM (the deep kernel serves fewer units):
// holes, short lens and infinite sinks there too, at width 640 (its
// producers refill each tile) and 128 (2 chunks: they never wait).
TEST_F(Dsv4Gpu, HolesShortLensAndInfiniteSinksBeyondOneTokenAnSm) {
  for (int32_t width : {640, 128}) {
    Dsv4ProblemConfig config = config_for(200, width);
    config.hole_fraction = 0.3;
    SCOPED_TRACE("W " + std::to_string(width));
    check_problem(config, [](Dsv4Problem& p) {
      shorten_lens_and_punch_holes(p);
      for (size_t h = 0; h < p.sinks.size(); h += 5) p.sinks[h] = std::numeric_limits<float>::infinity();
      for (size_t h = 2; h < p.sinks.size(); h += 5) p.sinks[h] = -std::numeric_limits<float>::infinity();
    });
  }
}

TEST_F(Dsv4Gpu, TokensWithNoActiveColumn) {
  Dsv4ProblemConfig config = config_for(12, 640);
  check_problem(config, empty_three_tokens);
}

// Counted once a column whatever the number of head groups that read it.
TEST_F(Dsv4Gpu, OutOfRangeIndicesAreMaskedAndCounted) {
  for (int32_t heads : {16, 8, 32, 128}) {
    Dsv4ProblemConfig config = config_for(12, 640);
    config.lens = false;
    config.heads = heads;
    SCOPED_TRACE("H " + std::to_string(heads));
    check_problem(config, add_out_of_range_indices);
  }
}

// 64-head tiles (docs/kernels/heads64.md) with every masking path: holes and
// short lens, tokens with no active column, sinks of +-inf, varlen seq_lens
// windows, out-of-range indices (counted once a column), a last chunk of 4
// columns, W = 128 (the stream kernel alone under kAuto) and W = 1024 (16
// groups, the widest 64-head call); each kernel against the reference, the
// stream and split kernels bit for bit.
TEST_F(Dsv4Gpu, Heads64MaskedColumnsSinksAndWindows) {
  for (int32_t heads : {64, 128}) {
    SCOPED_TRACE("H " + std::to_string(heads));
    // A forced kStream runs the dim halves up to one unit per two SMs (12
    // tokens), the one-CTA-a-unit kernel beyond (100 tokens).
    for (int64_t tokens : {12, 100}) {
      Dsv4ProblemConfig holes = config_for(tokens, 640);
      holes.heads = heads;
      holes.hole_fraction = 0.3;
      SCOPED_TRACE("T " + std::to_string(tokens));
      check_problem(holes, shorten_lens_and_punch_holes);
    }
    Dsv4ProblemConfig empty = config_for(12, 640);
    empty.heads = heads;
    check_problem(empty, empty_three_tokens);
    Dsv4ProblemConfig sinks = config_for(6, 644);
    sinks.heads = heads;
    check_problem(sinks, [](Dsv4Problem& p) {
      for (size_t h = 0; h < p.sinks.size(); ++h) {
        p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                     : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                  : 30.0f;
      }
    });
    Dsv4ProblemConfig out_of_range = config_for(12, 640);
    out_of_range.heads = heads;
    out_of_range.lens = false;
    check_problem(out_of_range, add_out_of_range_indices);
    check_four_varlen_requests(DType::kFloat8E4M3, heads == 64, heads);
    for (int32_t width : {128, 132, 1024}) {
      Dsv4ProblemConfig config = config_for(7, width);
      config.heads = heads;
      config.hole_fraction = 0.05;
      SCOPED_TRACE("W " + std::to_string(width));
      check_problem(config);
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
