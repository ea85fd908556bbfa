// What the 64-head form's GPU tests share (kStreamH64 in
// test_stream_h64.cpp, its split path kSplitH64 in test_split_h64.cpp): a
// problem run on one of them forced against the fp64 reference, the
// problems' edits, and the padded-strides check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {

// The problem on `kernel` alone, against the reference (which takes the
// call's sink term); kSplitH64 with a workspace of its own size, poisoned
// (a share read before it is written shows as NaN). Its seed is derived
// from the test's, so it is named as the case's.
inline DeviceResult check_h64_form(Dsv4PackedKernel kernel, const Dsv4PackedProblemConfig& config,
                                   const std::function<void(Dsv4PackedProblem&)>& edit = {},
                                   GroupCheck groups = GroupCheck::kEachRow,
                                   const std::function<void(Dsv4PackedDecodeArgs&)>& call = {}) {
  SCOPED_TRACE("case seed " + std::to_string(config.seed) + ", T " + std::to_string(config.tokens) + ", H " +
               std::to_string(config.heads) + ", widths " + std::to_string(config.swa_width) + "+" +
               std::to_string(config.extra_width) + ", page size " + std::to_string(config.page_size));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(config);
  if (edit) edit(problem);
  PackedDeviceProblem device(problem);
  device.args.kernel = kernel;
  if (call) call(device.args);
  const size_t bytes = workspace_size(device.args);
  if (kernel == Dsv4PackedKernel::kSplitH64) {
    EXPECT_GT(bytes, 0u) << "the split path needs its shares' workspace";
    device.workspace = testing::DeviceBuffer(std::max<size_t>(bytes, 16));
    device.workspace.fill_bytes(kPoisonByte);
  } else {
    EXPECT_EQ(bytes, 0u) << "the 64-head form needs no workspace";
  }
  return check_against_reference(problem, device, groups);
}

inline Dsv4PackedProblemConfig h64_config(uint64_t seed, int heads, int64_t tokens, int32_t extra_width = 512,
                                          int64_t page_size = 64) {
  Dsv4PackedProblemConfig c = config_for(seed, tokens, extra_width, page_size);
  c.heads = heads;
  return c;
}

// A token's SWA and extra widths.
struct SegmentWidths {
  int32_t swa, extra;
};

// T tokens at 64 and 128 heads, each of `widths` at page sizes 1, 61 and 256.
inline void check_widths_and_page_sizes(Dsv4PackedKernel kernel, int64_t tokens,
                                        std::initializer_list<SegmentWidths> widths) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128})
    for (const SegmentWidths& w : widths)
      for (int64_t page_size : {1, 61, 256}) {
        Dsv4PackedProblemConfig c = h64_config(seed + w.swa + w.extra + page_size, heads, tokens, w.extra, page_size);
        c.swa_width = w.swa;
        c.extra_rows = std::max<int64_t>(8192, 2 * w.extra);
        check_h64_form(kernel, c);
      }
}

// Every third token from `first` without an active column (zeros, lse -inf).
inline void clear_every_third_token(Dsv4PackedProblem& p, int64_t first) {
  for (int64_t t = first; t < p.config.tokens; t += 3) {
    if (!p.swa_lens.empty()) p.swa_lens[t] = 0;
    for (int64_t c = 0; c < p.swa_stride(); ++c) p.swa_indices[t * p.swa_stride() + c] = -1;
    p.extra_lens[t] = 0;
  }
}

// Every third token from `first` lists an index past the extra pool (counted, not read).
inline void index_past_the_extra_pool(Dsv4PackedProblem& p, int64_t first) {
  const int64_t rows = p.extra_pages * p.extra_page_size();
  for (int64_t t = first; t < p.config.tokens; t += 3) {
    p.extra_indices[t * p.extra_stride()] = static_cast<int32_t>(rows + t);
  }
}

// Sinks near the heads' lse (~7), ±inf, tokens 1 and 4 without rows (lse:
// the sink as given), with the sink in lse (kInOutputAndLse, the general
// form) and without: the same out, and every lse of a token with rows
// moved by its sink, so that an lse without it fails at every head.
inline void check_sinks_in_lse(Dsv4PackedKernel kernel, uint64_t seed, int heads) {
  const auto near_lse = [](Dsv4PackedProblem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 8 == 0 ? INFINITY : h % 8 == 1 ? -INFINITY : 6.0f + static_cast<float>(h % 8);
    }
    clear_every_third_token(p, 1);
  };
  const Dsv4PackedProblemConfig c = h64_config(seed, heads, 6);
  const auto sink_in_lse = [](Dsv4PackedDecodeArgs& a) { a.sink_term = SinkTerm::kInOutputAndLse; };
  const DeviceResult with_sink = check_h64_form(kernel, c, near_lse, GroupCheck::kEachRow, sink_in_lse);
  const DeviceResult without = check_h64_form(kernel, c, near_lse);
  EXPECT_EQ(with_sink.out, without.out) << "kInOutputAndLse changed out";
  for (int64_t t = 0; t < c.tokens; t += 3)  // tokens with rows: a sink of 8..13 moves lse by > 0.1
    for (int h = 0; h < heads; ++h) {
      if (h % 8 < 2) continue;
      const size_t i = static_cast<size_t>(t * heads + h);
      EXPECT_GT(with_sink.lse[i] - without.lse[i], 0.05f) << "token " << t << " head " << h;
    }
}

// q, out and lse at padded strides (NaN between q's rows, poison around
// out's and lse's rows) on `kernel`, with `call` applied: the contiguous
// call's bits, nothing written outside the rows.
inline void check_padded_strides(Dsv4PackedKernel kernel, int heads,
                                                  const std::function<void(Dsv4PackedDecodeArgs&)>& call = {}) {
  Dsv4PackedProblemConfig c = h64_config(test::fresh_seed(), heads, 5);
  SCOPED_TRACE(test::seed_message(c.seed) + ", H " + std::to_string(heads));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  const int H = c.heads;
  const int64_t q_head = 1024, q_token = H * q_head + 40, out_head = 640, out_token = H * out_head + 64;
  const int64_t lse_token = H + 24;
  std::vector<uint16_t> q(static_cast<size_t>(c.tokens) * q_token, 0x7FC0);  // NaN between the rows
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int h = 0; h < H; ++h)
      std::memcpy(&q[t * q_token + h * q_head], &problem.q[(t * H + h) * kHeadDim], kHeadDim * 2);
  const DeviceResult contiguous = check_h64_form(kernel, c);
  PackedDeviceProblem device(problem);
  device.args.kernel = kernel;
  device.workspace = testing::DeviceBuffer(std::max<size_t>(workspace_size(device.args), 16));
  testing::DeviceBuffer q_device(q), out(static_cast<size_t>(c.tokens) * out_token * 2), lse(c.tokens * lse_token * 4);
  Dsv4PackedDecodeArgs args = device.args;
  args.q = q_device.get(), args.q_token_stride = q_token, args.q_head_stride = q_head;
  args.out = out.get(), args.out_token_stride = out_token, args.out_head_stride = out_head;
  args.lse = lse.as<float>(), args.lse_token_stride = lse_token;
  if (call) call(args);
  out.fill_bytes(kPoisonByte), lse.fill_bytes(kPoisonByte);
  EXPECT_TRUE(device.decode(args).ok());
  const std::vector<uint16_t> got = out.download<uint16_t>();
  const std::vector<float> got_lse = lse.download<float>();
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      EXPECT_EQ(
          std::memcmp(&got[t * out_token + h * out_head], &contiguous.out[(t * H + h) * kHeadDim], kHeadDim * 2), 0)
          << "token " << t << " head " << h;
      for (int64_t d = kHeadDim; d < out_head; ++d) EXPECT_EQ(got[t * out_token + h * out_head + d], 0xFFFF);
      if (args.lse) EXPECT_EQ(std::memcmp(&got_lse[t * lse_token + h], &contiguous.lse[t * H + h], 4), 0);
    }
    for (int64_t e = int64_t{H} * out_head; e < out_token; ++e) EXPECT_EQ(got[t * out_token + e], 0xFFFF);
    for (int64_t h = args.lse ? H : 0; h < lse_token; ++h) {
      uint32_t bits;
      std::memcpy(&bits, &got_lse[t * lse_token + h], 4);
      EXPECT_EQ(bits, 0xFFFFFFFFu) << "lse written outside its rows";
    }
  }
}

}  // namespace sparse_decode::gpu_test::dsv4_packed
