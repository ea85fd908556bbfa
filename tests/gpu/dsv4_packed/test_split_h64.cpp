// The 64-head form's split path (Dsv4PackedKernel::kSplitH64, forced): a
// (token, 64-head group) unit's chunks in runs over up to 16 CTAs whose
// shares the combine kernel folds, against the fp64 reference at 64 and
// 128 heads: token counts from one share a chunk to one CTA a unit, widths
// from one chunk to 68 (1 to 16 shares: every combine instance), holes,
// short lens, tokens with nothing active (every share empty) or only past
// their first run, sinks in the output and in lse, strided q, out and lse
// under PDL and without lse, and the same bits run after run. Outputs and the workspace are poisoned before each
// run; the seed is printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

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
// chunk, 4 chunks (4 shares), and wide extra segments (19, 32 and 68
// chunks: 10, 16 and 14 shares, runs of 2, 2 and 5 chunks), at page sizes
// 1, 61 and 256.
TEST_F(Dsv4PackedGpu, SplitH64WidthsAndPageSizes) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const int32_t widths[][2] = {{128, 0}, {64, 0}, {1, 1}, {77, 0}, {128, 128}, {130, 1024}, {128, 1920}, {256, 4096}};
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
    // No SWA column: the first run (rank 0) has nothing active, the later ones do.
    check_split_h64(split_config(seed + heads + 3, heads, 4), [](Dsv4PackedProblem& p) {
      for (int64_t t = 0; t < p.config.tokens; ++t) {
        if (!p.swa_lens.empty()) p.swa_lens[t] = 0;
        for (int64_t c = 0; c < p.swa_stride(); ++c) p.swa_indices[t * p.swa_stride() + c] = -1;
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
    // Sinks near the heads' lse (~7), ±inf; tokens 1 and 4 without rows (lse: the sink as given).
    const auto extremes = [](Dsv4PackedProblem& p) {
      for (size_t h = 0; h < p.sinks.size(); ++h) {
        p.sinks[h] = h % 8 == 0 ? INFINITY : h % 8 == 1 ? -INFINITY : 6.0f + static_cast<float>(h % 8);
      }
      for (int64_t t = 1; t < p.config.tokens; t += 3) {
        if (!p.swa_lens.empty()) p.swa_lens[t] = 0;
        for (int64_t c = 0; c < p.swa_stride(); ++c) p.swa_indices[t * p.swa_stride() + c] = -1;
        p.extra_lens[t] = 0;
      }
    };
    const Dsv4PackedProblemConfig c = split_config(seed + heads + 2, heads, 6);
    const DeviceResult with_sink = check_split_h64(
        c, extremes, GroupCheck::kEachRow, [](Dsv4PackedDecodeArgs& a) { a.sink_term = SinkTerm::kInOutputAndLse; });
    const DeviceResult without = check_split_h64(c, extremes);
    EXPECT_EQ(with_sink.out, without.out) << "kInOutputAndLse changed out";
    for (int64_t t = 0; t < c.tokens; t += 3)  // tokens with rows: a sink of 8..13 moves lse by > 0.1
      for (int h = 0; h < heads; ++h) {
        if (h % 8 < 2) continue;
        const size_t i = static_cast<size_t>(t * heads + h);
        EXPECT_GT(with_sink.lse[i] - without.lse[i], 0.05f) << "token " << t << " head " << h;
      }
  }
}

// q, out and lse at padded strides (NaN between q's rows, poison around
// out's and lse's), under PDL, give the contiguous call's bits and write
// nothing outside the rows; without lse, out keeps its bits.
TEST_F(Dsv4PackedGpu, SplitH64StridedPdlAndNoLse) {
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig c = split_config(test::fresh_seed(), heads, 5);
    SCOPED_TRACE(test::seed_message(c.seed) + ", H " + std::to_string(heads));
    Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
    const int H = c.heads;
    const int64_t q_head = 1024, q_token = H * q_head + 40, out_head = 640, out_token = H * out_head + 64;
    const int64_t lse_token = H + 24;
    std::vector<uint16_t> q(static_cast<size_t>(c.tokens) * q_token, 0x7FC0);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int h = 0; h < H; ++h)
        std::memcpy(&q[t * q_token + h * q_head], &problem.q[(t * H + h) * kHeadDim], kHeadDim * 2);
    const DeviceResult contiguous = check_split_h64(c);
    PackedDeviceProblem device(problem);
    device.args.kernel = Dsv4PackedKernel::kSplitH64;
    device.workspace = testing::DeviceBuffer(workspace_size(device.args));
    device.workspace.fill_bytes(kPoisonByte);
    testing::DeviceBuffer q_device(q), out(static_cast<size_t>(c.tokens) * out_token * 2),
        lse(c.tokens * lse_token * 4);
    Dsv4PackedDecodeArgs args = device.args;
    args.q = q_device.get(), args.q_token_stride = q_token, args.q_head_stride = q_head;
    args.out = out.get(), args.out_token_stride = out_token, args.out_head_stride = out_head;
    args.lse = lse.as<float>(), args.lse_token_stride = lse_token;
    args.enable_pdl = true;
    out.fill_bytes(kPoisonByte), lse.fill_bytes(kPoisonByte);
    ASSERT_TRUE(device.decode(args).ok());
    const std::vector<uint16_t> got = out.download<uint16_t>();
    const std::vector<float> got_lse = lse.download<float>();
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int h = 0; h < H; ++h) {
        ASSERT_EQ(
            std::memcmp(&got[t * out_token + h * out_head], &contiguous.out[(t * H + h) * kHeadDim], kHeadDim * 2), 0)
            << "token " << t << " head " << h;
        for (int64_t d = kHeadDim; d < out_head; ++d) ASSERT_EQ(got[t * out_token + h * out_head + d], 0xFFFF);
        EXPECT_EQ(std::memcmp(&got_lse[t * lse_token + h], &contiguous.lse[t * H + h], 4), 0);
      }
      for (int64_t e = int64_t{H} * out_head; e < out_token; ++e) ASSERT_EQ(got[t * out_token + e], 0xFFFF);
      for (int64_t h = H; h < lse_token; ++h) {
        uint32_t bits;
        std::memcpy(&bits, &got_lse[t * lse_token + h], 4);
        ASSERT_EQ(bits, 0xFFFFFFFFu) << "lse padding written";
      }
    }
    args.lse = nullptr;
    out.fill_bytes(kPoisonByte);
    ASSERT_TRUE(device.decode(args).ok());
    EXPECT_EQ(out.download<uint16_t>(), got) << "out without lse";
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
