// The 64-head form's split path (Dsv4PackedKernel::kSplitH64, forced): a
// (token, 64-head group) unit's chunks in runs over up to 16 CTAs whose
// shares the combine kernel folds, against the fp64 reference at 64 and
// 128 heads: token counts from one share a chunk to one CTA a unit, widths
// from one chunk to 68 (16 shares), holes, short lens, tokens with nothing
// active (every share empty), sinks in the output and in lse, and the same
// bits run after run. Outputs and the workspace are poisoned before each
// run; the seed is printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// The problem on the split path alone, with a workspace of its own size
// (poisoned: a share read before it is written shows as NaN).
DeviceResult check_split_h64(const Dsv4PackedProblemConfig& config,
                             const std::function<void(Dsv4PackedProblem&)>& edit = {},
                             GroupCheck groups = GroupCheck::kEachRow,
                             const std::function<void(Dsv4PackedDecodeArgs&)>& call = {}) {
  SCOPED_TRACE("case seed " + std::to_string(config.seed) + ", T " + std::to_string(config.tokens) + ", H " +
               std::to_string(config.heads) + ", widths " + std::to_string(config.swa_width) + "+" +
               std::to_string(config.extra_width) + ", page size " + std::to_string(config.page_size));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(config);
  if (edit) edit(problem);
  PackedDeviceProblem device(problem);
  device.args.kernel = Dsv4PackedKernel::kSplitH64;
  if (call) call(device.args);
  const size_t bytes = workspace_size(device.args);
  EXPECT_GT(bytes, 0u) << "the split path needs its shares' workspace";
  device.workspace = testing::DeviceBuffer(std::max<size_t>(bytes, 16));
  device.workspace.fill_bytes(kPoisonByte);
  return check_against_reference(problem, device, groups);
}

Dsv4PackedProblemConfig split_config(uint64_t seed, int heads, int64_t tokens, int32_t extra_width = 512,
                                     int64_t page_size = 64) {
  Dsv4PackedProblemConfig c = config_for(seed, tokens, extra_width, page_size);
  c.heads = heads;
  return c;
}

// W = 640 (10 chunks): T = 1 (10 shares of a chunk), 6 and 13 (at 64
// heads 10 shares, at 128 heads 10 and 5 of 2 chunks), 48 (2 of 5 at 64
// heads, one CTA a unit at 128) and 70 (one CTA a unit, one share).
TEST_F(Dsv4PackedGpu, SplitH64TokenCounts) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128})
    for (int64_t tokens : {1, 6, 13, 48, 70}) check_split_h64(split_config(seed + tokens + heads, heads, tokens));
}

// SWA only (2 chunks), one chunk (one share), widths that end inside a
// chunk, and wide extra segments (19 and 68 chunks: 10 and 14 shares, runs
// of 2 and 5 chunks), at page sizes 1, 61 and 256.
TEST_F(Dsv4PackedGpu, SplitH64WidthsAndPageSizes) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const int32_t widths[][2] = {{128, 0}, {64, 0}, {1, 1}, {77, 0}, {130, 1024}, {256, 4096}};
  for (int heads : {64, 128})
    for (const auto& w : widths)
      for (int64_t page_size : {1, 61, 256}) {
        Dsv4PackedProblemConfig c = split_config(seed + w[0] + w[1] + page_size, heads, 3, w[1], page_size);
        c.swa_width = w[0];
        c.extra_rows = std::max<int64_t>(8192, 2 * w[1]);
        check_split_h64(c);
      }
}

// Holes (-1) in a third of the extra columns, short lens (shares whose
// runs hold no active column), tokens whose columns are all inactive
// (every share empty: zeros, lse -inf) and out-of-range indices (counted
// once, by the share that lists them, not read).
TEST_F(Dsv4PackedGpu, SplitH64HolesLensAndEmptyTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig holes = split_config(seed + heads, heads, 12);
    holes.hole_fraction = 0.3;
    holes.short_fraction = 0.5;
    check_split_h64(holes);
    check_split_h64(split_config(seed + heads + 2, heads, 9), [](Dsv4PackedProblem& p) {
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

// Sinks: none and ±inf and large ones in the output; in lse too (the
// general form: kInOutputAndLse), which must move every head's lse of a
// token with rows and leave out unchanged.
TEST_F(Dsv4PackedGpu, SplitH64Sinks) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig none = split_config(seed + heads, heads, 6);
    none.sinks = false;
    check_split_h64(none);
    const auto extremes = [](Dsv4PackedProblem& p) {
      for (size_t h = 0; h < p.sinks.size(); ++h) {
        p.sinks[h] = h % 8 == 0 ? INFINITY : h % 8 == 1 ? -INFINITY : 6.0f + static_cast<float>(h % 8);
      }
    };
    const Dsv4PackedProblemConfig c = split_config(seed + heads + 2, heads, 6);
    const DeviceResult with_sink = check_split_h64(
        c, extremes, GroupCheck::kEachRow, [](Dsv4PackedDecodeArgs& a) { a.sink_term = SinkTerm::kInOutputAndLse; });
    const DeviceResult without = check_split_h64(c, extremes);
    EXPECT_EQ(with_sink.out, without.out) << "kInOutputAndLse changed out";
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int h = 0; h < heads; ++h) {
        if (h % 8 < 2) continue;
        const size_t i = static_cast<size_t>(t * heads + h);
        EXPECT_GT(with_sink.lse[i] - without.lse[i], 0.05f) << "token " << t << " head " << h;
      }
  }
}

// The same call twice gives the same bits (the combine folds the shares in
// rank order).
TEST_F(Dsv4PackedGpu, SplitH64Deterministic) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    const Dsv4PackedProblemConfig c = split_config(seed + heads, heads, 5);
    const DeviceResult first = check_split_h64(c);
    const DeviceResult second = check_split_h64(c);
    EXPECT_EQ(first.out, second.out);
    EXPECT_EQ(first.lse, second.lse);
  }
}

// A forced kSplitH64 without a workspace that fits (none, one byte short,
// misaligned) is refused naming workspace_bytes, and writes nothing.
TEST_F(Dsv4PackedGpu, SplitH64RefusesASmallWorkspace) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4PackedProblemConfig c = split_config(seed, 64, 4);
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = Dsv4PackedKernel::kSplitH64;
  const size_t needed = workspace_size(device.args);
  ASSERT_GT(needed, 0u);
  device.workspace = testing::DeviceBuffer(needed + 16);
  gpu_test::poison_outputs(device.out, device.lse, device.out_of_range_count);
  const DeviceResult before = gpu_test::download_outputs(device.out, device.lse, device.out_of_range_count);
  for (size_t bytes : {size_t{0}, needed - 1}) {
    const Status status =
        dsv4_decode_packed(device.args, bytes ? device.workspace.get() : nullptr, bytes, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
  }
  const Status misaligned = dsv4_decode_packed(device.args, device.workspace.as<uint8_t>() + 8, needed, nullptr);
  EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument) << misaligned.message();
  const DeviceResult after = gpu_test::download_outputs(device.out, device.lse, device.out_of_range_count);
  EXPECT_EQ(before.out, after.out) << "a refused call wrote out";
  EXPECT_EQ(before.lse, after.lse) << "a refused call wrote lse";
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
