// The packed stream kernel's 64-head form (Dsv4PackedKernel::kStreamH64,
// forced; kAuto does not pick it) against the fp64 reference: 64 and 128
// heads over token counts from one to past a wave of 132 CTAs, both segment
// shapes, odd widths, page sizes, sinks (in the output, in lse, none),
// holes and short lens, tokens with nothing active, the UE8M0 scale range
// and query dims of very different magnitudes. Outputs are poisoned before
// each run (checks.h); the seed is printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// The problem run by the 64-head form alone, against the reference.
DeviceResult check_h64(const Dsv4PackedProblemConfig& config, const std::function<void(Dsv4PackedProblem&)>& edit = {},
                       GroupCheck groups = GroupCheck::kEachRow,
                       const std::function<void(Dsv4PackedDecodeArgs&)>& call = {}) {
  SCOPED_TRACE(test::seed_message(config.seed) + ", T " + std::to_string(config.tokens) + ", H " +
               std::to_string(config.heads) + ", widths " + std::to_string(config.swa_width) + "+" +
               std::to_string(config.extra_width) + ", page size " + std::to_string(config.page_size));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(config);
  if (edit) edit(problem);
  PackedDeviceProblem device(problem);
  device.args.kernel = Dsv4PackedKernel::kStreamH64;
  if (call) call(device.args);
  EXPECT_EQ(workspace_size(device.args), 0u) << "the 64-head form needs no workspace";
  return check_against_reference(problem, device, groups);
}

Dsv4PackedProblemConfig h64_config(uint64_t seed, int heads, int64_t tokens, int32_t extra_width = 512,
                                   int64_t page_size = 64) {
  Dsv4PackedProblemConfig c = config_for(seed, tokens, extra_width, page_size);
  c.heads = heads;
  return c;
}

// T = 1 (one CTA a 64-head group), 6 and 13 (one request and a short last
// one), 48, 130 (past a wave at 128 heads: 260 CTAs) and 300.
TEST_F(Dsv4PackedGpu, StreamH64TokenCounts) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {64, 128})
    for (int64_t tokens : {1, 6, 13, 48, 130, 300}) check_h64(h64_config(seed + tokens + heads, heads, tokens));
}

// SWA only (2 chunks), one chunk, widths that end inside a chunk, and wide
// extra segments (the walk over many chunks), at page sizes 1, 61 and 256.
TEST_F(Dsv4PackedGpu, StreamH64WidthsAndPageSizes) {
  const uint64_t seed = test::fresh_seed();
  const int32_t widths[][2] = {{128, 0}, {64, 0}, {1, 1}, {77, 0}, {130, 1024}, {256, 4096}};
  for (int heads : {64, 128})
    for (const auto& w : widths)
      for (int64_t page_size : {1, 61, 256}) {
        Dsv4PackedProblemConfig c = h64_config(seed + w[0] + w[1] + page_size, heads, 7, w[1], page_size);
        c.swa_width = w[0];
        c.extra_rows = std::max<int64_t>(8192, 2 * w[1]);
        check_h64(c);
      }
}

// Holes (-1) in a third of the extra columns, short lens, no SWA lens
// (unfilled columns -1), tokens whose columns are all inactive (zeros, lse
// -inf) and out-of-range indices (counted, not read).
TEST_F(Dsv4PackedGpu, StreamH64HolesLensAndEmptyTokens) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig holes = h64_config(seed + heads, heads, 24);
    holes.hole_fraction = 0.3;
    holes.short_fraction = 0.5;
    check_h64(holes);
    Dsv4PackedProblemConfig no_lens = h64_config(seed + heads + 1, heads, 12);
    no_lens.swa_lens = false;
    check_h64(no_lens);
    check_h64(h64_config(seed + heads + 2, heads, 9), [](Dsv4PackedProblem& p) {
      for (int64_t t = 0; t < p.config.tokens; t += 3) {  // every third token: nothing active
        if (!p.swa_lens.empty()) p.swa_lens[t] = 0;
        for (int64_t c = 0; c < p.swa_stride(); ++c) p.swa_indices[t * p.swa_stride() + c] = -1;
        p.extra_lens[t] = 0;
      }
      const int64_t rows = p.extra_pages * p.extra_page_size();
      for (int64_t t = 1; t < p.config.tokens; t += 3) {  // an index past the extra pool
        p.extra_indices[t * p.extra_stride()] = static_cast<int32_t>(rows + t);
      }
    });
  }
}

// Sinks: none, ±inf and large ones in the output, and in lse too (the
// general form: kInOutputAndLse).
TEST_F(Dsv4PackedGpu, StreamH64Sinks) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig none = h64_config(seed + heads, heads, 6);
    none.sinks = false;
    check_h64(none);
    check_h64(h64_config(seed + heads + 1, heads, 6), [](Dsv4PackedProblem& p) {
      for (size_t h = 0; h < p.sinks.size(); ++h) {
        p.sinks[h] = h % 4 == 0 ? INFINITY : h % 4 == 1 ? -INFINITY : h % 4 == 2 ? 30.0f : p.sinks[h];
      }
    });
    check_h64(h64_config(seed + heads + 2, heads, 6), {}, GroupCheck::kEachRow,
              [](Dsv4PackedDecodeArgs& a) { a.sink_term = SinkTerm::kInOutputAndLse; });
  }
}

// Scale bytes over 100..150 with the extremes 0, 2, 15, 150, 160 in a fifth
// of the tiles (values from 2^-136 to 2^42): the chunk's scale exponent of
// each (head, scale tile) comes from the softmax's largest key.
TEST_F(Dsv4PackedGpu, StreamH64ScaleBytesAcrossTheUe8m0Range) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {64, 128})
    for (int range : {0, 1}) {
      Dsv4PackedProblemConfig c = h64_config(seed + range + heads, heads, 12);
      c.scale_min = range ? 100 : 112;
      c.scale_max = range ? 150 : 132;
      c.extreme_fraction = range ? 0.2 : 0.0;
      check_h64(c, {}, range ? GroupCheck::kOverRows : GroupCheck::kEachRow);
    }
}

// Heads whose FP8 dims are 2^100 below their BF16 dims, or 2^40 above, in
// each of the four 16-head groups of the Q tile.
TEST_F(Dsv4PackedGpu, StreamH64QueryDimsOfVeryDifferentMagnitudes) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {64, 128}) {
    check_h64(h64_config(seed + heads, heads, 12), [](Dsv4PackedProblem& p) {
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
}

// The same call twice gives the same bits, and a token alone the bits it
// has inside a batch (one CTA a unit: nothing depends on the batch).
TEST_F(Dsv4PackedGpu, StreamH64DeterministicAndBatchInvariant) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(h64_config(seed, 128, 13));
  PackedDeviceProblem device(problem);
  device.args.kernel = Dsv4PackedKernel::kStreamH64;
  const DeviceResult first = run_device(device);
  const DeviceResult second = run_device(device);
  EXPECT_EQ(first.out, second.out);
  EXPECT_EQ(first.lse, second.lse);
  // Token 4 alone: its q, indices, lens, out and lse rows as a batch of one.
  const int64_t t = 4;
  const int64_t out_row = int64_t{problem.config.heads} * kHeadDim;
  Dsv4PackedDecodeArgs one = device.args;
  one.num_tokens = 1;
  one.q = static_cast<const uint16_t*>(device.args.q) + t * device.args.q_token_stride;
  one.swa.indices += t * device.args.swa.indices_stride;
  if (one.swa.lens) one.swa.lens += t;
  one.extra.indices += t * device.args.extra.indices_stride;
  one.extra.lens += t;
  one.out = static_cast<uint16_t*>(device.args.out) + t * device.args.out_token_stride;
  one.lse = device.args.lse ? device.args.lse + t * device.args.lse_token_stride : nullptr;
  gpu_test::poison_outputs(device.out, device.lse, device.out_of_range_count);
  ASSERT_TRUE(device.decode(one).ok());
  const DeviceResult alone = gpu_test::download_outputs(device.out, device.lse, device.out_of_range_count);
  EXPECT_TRUE(std::equal(first.out.begin() + t * out_row, first.out.begin() + (t + 1) * out_row,
                         alone.out.begin() + t * out_row))
      << "token " << t << " alone differs from the batch";
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
