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

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "gpu/dsv4_packed/checks.h"
#include "gpu/dsv4_packed/h64_checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// The problem on the split path alone (h64_checks.h).
DeviceResult check_split_h64(const Dsv4PackedProblemConfig& config,
                             const std::function<void(Dsv4PackedProblem&)>& edit = {},
                             GroupCheck groups = GroupCheck::kEachRow,
                             const std::function<void(Dsv4PackedDecodeArgs&)>& call = {}) {
  return check_h64_form(Dsv4PackedKernel::kSplitH64, config, edit, groups, call);
}

// W = 640 (10 chunks): T = 1 (10 shares of a chunk), 6 and 13 (at 64
// heads 10 shares, at 128 heads 10 and 5 of 2 chunks), 48 (2 of 5 at 64
// heads, one CTA a unit at 128) and 70 (one CTA a unit, one share).
TEST_F(Dsv4PackedGpu, SplitH64TokenCounts) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128})
    for (int64_t tokens : {1, 6, 13, 48, 70}) check_split_h64(h64_config(seed + tokens + heads, heads, tokens));
}

// SWA only (2 chunks), one chunk (one share), widths that end inside a
// chunk, 4 chunks (4 shares), and wide extra segments (19, 32 and 68
// chunks: 10, 16 and 14 shares, runs of 2, 2 and 5 chunks), at page sizes
// 1, 61 and 256.
TEST_F(Dsv4PackedGpu, SplitH64WidthsAndPageSizes) {
  check_widths_and_page_sizes(Dsv4PackedKernel::kSplitH64, 3,
                              {{128, 0}, {64, 0}, {1, 1}, {77, 0}, {128, 128}, {130, 1024}, {128, 1920}, {256, 4096}});
}

// Holes (-1) in a third of the extra columns, short lens (shares whose
// runs hold no active column), tokens whose columns are all inactive
// (every share empty: zeros, lse -inf) and out-of-range indices (counted
// once, by the share that lists them, not read).
TEST_F(Dsv4PackedGpu, SplitH64HolesLensAndEmptyTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig holes = h64_config(seed + heads, heads, 12);
    holes.hole_fraction = 0.3;
    holes.short_fraction = 0.5;
    check_split_h64(holes);
    check_split_h64(h64_config(seed + heads + 2, heads, 9), [](Dsv4PackedProblem& p) {
      clear_every_third_token(p, 0);
      index_past_the_extra_pool(p, 1);
    });
    // No SWA column: the first run (rank 0) has nothing active, the later ones do.
    check_split_h64(h64_config(seed + heads + 3, heads, 4), [](Dsv4PackedProblem& p) {
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
    Dsv4PackedProblemConfig none = h64_config(seed + heads, heads, 6);
    none.sinks = false;
    check_split_h64(none);
    check_sinks_in_lse(Dsv4PackedKernel::kSplitH64, seed + heads + 2, heads);
  }
}

// q, out and lse at padded strides (NaN between q's rows, poison around
// out's and lse's), under PDL, give the contiguous call's bits and write
// nothing outside the rows; without lse, out keeps its bits.
TEST_F(Dsv4PackedGpu, SplitH64StridedPdlAndNoLse) {
  for (int heads : {64, 128}) {
    check_padded_strides(Dsv4PackedKernel::kSplitH64, heads, [](Dsv4PackedDecodeArgs& a) { a.enable_pdl = true; });
    // Without lse: out still the contiguous call's bits (with lse), lse's buffer untouched.
    check_padded_strides(Dsv4PackedKernel::kSplitH64, heads, [](Dsv4PackedDecodeArgs& a) {
      a.enable_pdl = true;
      a.lse = nullptr;
    });
  }
}

// The same call twice gives the same bits (the combine folds the shares in
// rank order).
TEST_F(Dsv4PackedGpu, SplitH64Deterministic) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    const Dsv4PackedProblemConfig c = h64_config(seed + heads, heads, 5);
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
  const Dsv4PackedProblemConfig c = h64_config(seed, 64, 4);
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
  ASSERT_EQ(before.lse.size(), after.lse.size());
  EXPECT_EQ(std::memcmp(before.lse.data(), after.lse.data(), after.lse.size() * sizeof(float)), 0)
      << "a refused call wrote lse";  // bits: the poison is NaN
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
