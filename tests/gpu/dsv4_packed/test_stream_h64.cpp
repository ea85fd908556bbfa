// The packed stream kernel's 64-head form (Dsv4PackedKernel::kStreamH64,
// forced; kAuto's pick is tested in test_dispatch.cpp) against the fp64 reference: 64 and 128
// heads over token counts from one to past a wave of 132 CTAs, both segment
// shapes, odd widths, page sizes, sinks (in the output, in lse, none),
// holes and short lens, tokens with nothing active, the UE8M0 scale range
// and query dims of very different magnitudes. Outputs are poisoned before
// each run (checks.h); the seed is printed on failure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "gpu/dsv4_packed/h64_checks.h"
#include "support/packed_windows.h"
#include "support/request_views.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

// The problem on the 64-head form alone (h64_checks.h).
DeviceResult check_h64(const Dsv4PackedProblemConfig& config, const std::function<void(Dsv4PackedProblem&)>& edit = {},
                       GroupCheck groups = GroupCheck::kEachRow,
                       const std::function<void(Dsv4PackedDecodeArgs&)>& call = {}) {
  return check_h64_form(Dsv4PackedKernel::kStreamH64, config, edit, groups, call);
}

// T = 1 (one CTA a 64-head group), 6 and 13 (one request and a short last
// one), 48, 130 (past a wave at 128 heads: 260 CTAs) and 300.
TEST_F(Dsv4PackedGpu, StreamH64TokenCounts) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128})
    for (int64_t tokens : {1, 6, 13, 48, 130, 300}) check_h64(h64_config(seed + tokens + heads, heads, tokens));
}

// SWA only (2 chunks), one chunk, widths that end inside a chunk, and wide
// extra segments (the walk over many chunks), at page sizes 1, 61 and 256.
TEST_F(Dsv4PackedGpu, StreamH64WidthsAndPageSizes) {
  check_widths_and_page_sizes(Dsv4PackedKernel::kStreamH64, 7,
                              {{128, 0}, {64, 0}, {1, 1}, {77, 0}, {130, 1024}, {256, 4096}});
}

// Holes (-1) in a third of the extra columns, short lens, no SWA lens
// (unfilled columns -1), tokens whose columns are all inactive (zeros, lse
// -inf) and out-of-range indices (counted, not read).
TEST_F(Dsv4PackedGpu, StreamH64HolesLensAndEmptyTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig holes = h64_config(seed + heads, heads, 24);
    holes.hole_fraction = 0.3;
    holes.short_fraction = 0.5;
    check_h64(holes);
    Dsv4PackedProblemConfig no_lens = h64_config(seed + heads + 1, heads, 12);
    no_lens.swa_lens = false;
    check_h64(no_lens);
    check_h64(h64_config(seed + heads + 2, heads, 9), [](Dsv4PackedProblem& p) {
      clear_every_third_token(p, 0);
      index_past_the_extra_pool(p, 1);
    });
  }
}

// Sinks: none, ±inf and large ones in the output, and in lse too (the
// general form: kInOutputAndLse) with sinks near the heads' lse (~7), ±inf
// and tokens without rows (lse: the sink as given), so that an lse without
// its sink fails at every head.
TEST_F(Dsv4PackedGpu, StreamH64Sinks) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig none = h64_config(seed + heads, heads, 6);
    none.sinks = false;
    check_h64(none);
    check_h64(h64_config(seed + heads + 1, heads, 6), [](Dsv4PackedProblem& p) {
      for (size_t h = 0; h < p.sinks.size(); ++h) {
        p.sinks[h] = h % 4 == 0 ? INFINITY : h % 4 == 1 ? -INFINITY : h % 4 == 2 ? 30.0f : p.sinks[h];
      }
    });
    check_sinks_in_lse(Dsv4PackedKernel::kStreamH64, seed + heads + 2, heads);
  }
}

// Scale bytes over 100..150 with the extremes 0, 2, 15, 150, 160 in a fifth
// of the tiles (values from 2^-136 to 2^42): each scale tile's values stay
// exact in the key tile relative to their row's key byte, and a head's
// scale exponent comes from its largest P 2^(key byte - 127).
TEST_F(Dsv4PackedGpu, StreamH64ScaleBytesAcrossTheUe8m0Range) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
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
  SCOPED_TRACE(test::seed_message(seed));
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

// The general form's token addressing at 64 and 128 heads: q, both
// segments' indices and lens, out and lse as [B, q_len] request views whose
// leading dims do not merge give the flat call's bits, and nothing outside
// the views' rows is written (the second 64-head group's rows included).
TEST_F(Dsv4PackedGpu, StreamH64RequestViewsGiveTheFlatBits) {
  struct Shape {
    int heads;
    int32_t requests, q_len;
    bool extra;
  };
  for (const Shape& shape : {Shape{64, 3, 4, true}, Shape{128, 2, 5, false}, Shape{128, 3, 7, true}}) {
    const int heads = shape.heads;
    const int32_t requests = shape.requests, q_len = shape.q_len;
    const int64_t T = int64_t{requests} * q_len;
    Dsv4PackedProblemConfig config = h64_config(test::fresh_seed(), heads, T, shape.extra ? 512 : 0);
    config.q_len = q_len;
    SCOPED_TRACE(test::seed_message(config.seed) + ", H " + std::to_string(heads) + ", B " +
                 std::to_string(requests) + ", q_len " + std::to_string(q_len));
    const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
    PackedDeviceProblem flat(p);
    flat.args.kernel = Dsv4PackedKernel::kStreamH64;
    const DeviceResult want = check_against_reference(p, flat);
    const int64_t row = int64_t{heads} * kHeadDim;
    const test::ViewStrides q_view = test::interleaved_view(row + 8, requests);
    DeviceBuffer q(test::to_view<uint16_t>(p.q.data(), row, row, T, q_len, q_view, 0xFFFF));
    Dsv4PackedDecodeArgs views = flat.args;
    views.num_requests = requests, views.q_len = q_len;
    views.q = q.get(), views.q_token_stride = q_view.token_stride, views.q_request_stride = q_view.request_stride;
    // Each segment's indices and lens as padded request views.
    std::vector<DeviceBuffer> keep;
    keep.reserve(4);
    auto segment_views = [&](PackedSegment& seg, const std::vector<int32_t>& indices, int64_t stride, int32_t width,
                             const std::vector<int32_t>& lens) {
      const test::ViewStrides iv = test::padded_view(stride + 4, q_len, 8), lv = test::padded_view(3, q_len, 2);
      keep.emplace_back(test::to_view<int32_t>(indices.data(), stride, width, T, q_len, iv, 0));
      seg.indices = keep.back().as<int32_t>();
      seg.indices_stride = iv.token_stride, seg.indices_request_stride = iv.request_stride;
      if (!lens.empty()) {
        keep.emplace_back(test::to_view<int32_t>(lens.data(), 1, 1, T, q_len, lv, 1 << 20));
        seg.lens = keep.back().as<int32_t>();
        seg.lens_token_stride = lv.token_stride, seg.lens_request_stride = lv.request_stride;
      }
    };
    segment_views(views.swa, p.swa_indices, p.swa_stride(), config.swa_width, p.swa_lens);
    if (shape.extra) segment_views(views.extra, p.extra_indices, p.extra_stride(), config.extra_width, p.extra_lens);
    const test::ViewStrides out_view = test::padded_view(row + 8, q_len, 16);
    const test::ViewStrides lse_view = test::padded_view(heads + 1, q_len, 1);
    DeviceBuffer out(test::view_extent(out_view, requests, q_len, row) * 2);
    DeviceBuffer lse(test::view_extent(lse_view, requests, q_len, heads) * 4);
    views.out = out.get(), views.out_token_stride = out_view.token_stride;
    views.out_request_stride = out_view.request_stride;
    views.lse = lse.as<float>(), views.lse_token_stride = lse_view.token_stride;
    views.lse_request_stride = lse_view.request_stride;
    out.fill_bytes(kPoisonByte), lse.fill_bytes(kPoisonByte);
    gpu_test::poison_outputs(flat.out, flat.lse, flat.out_of_range_count);
    const Status status = flat.decode(views);
    ASSERT_TRUE(status.ok()) << status.message();
    testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "views");
    const uint16_t out_poison = 0xFFFF;
    float lse_poison;
    std::memset(&lse_poison, kPoisonByte, 4);
    bool out_padding = false, lse_padding = false;
    EXPECT_TRUE(test::from_view(out.download<uint16_t>(), row, T, q_len, out_view, out_poison, &out_padding) ==
                want.out)
        << "out through the views differs from the flat call";
    const std::vector<float> got_lse =
        test::from_view(lse.download<float>(), heads, T, q_len, lse_view, lse_poison, &lse_padding);
    EXPECT_EQ(std::memcmp(got_lse.data(), want.lse.data(), got_lse.size() * 4), 0) << "lse differs";
    EXPECT_TRUE(out_padding && lse_padding) << "written outside the views' rows";
    int32_t count = 0;
    flat.out_of_range_count.download(&count, 4);
    EXPECT_EQ(count, want.count);
  }
}

// The seq_lens window (the general form) at 64 and 128 heads: the call with
// seq_lens gives the bits of the call without it on indices windowed by
// hand, and the reference's values; uniform and varlen requests.
TEST_F(Dsv4PackedGpu, StreamH64SeqLensWindow) {
  struct Case {
    test::PackedRequests requests;
    const char* what;
  };
  const Case cases[] = {{{{2, 60, 130, 300}, 3, {}}, "uniform"},
                        {{{2, 3, 130, 70}, 0, {0, 1, 4, 9, 12}}, "varlen"},
                        {{{9, 4, 40}, 0, {1, 3, 3, 10}}, "empty request, padding tokens"}};
  for (int heads : {64, 128})
    for (const Case& k : cases) {
      Dsv4PackedProblemConfig config = h64_config(test::fresh_seed(), heads, 12);
      SCOPED_TRACE(std::string(k.what) + ", " + test::seed_message(config.seed) + ", H " + std::to_string(heads));
      const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
      int64_t cut = 0;
      Dsv4PackedProblem windowed = p;
      windowed.swa_indices = test::windowed_swa_indices(p, k.requests, &cut);
      EXPECT_GT(cut, 0) << "no column is cut by the window alone: the test proves little";
      PackedDeviceProblem with(p), plain(windowed);
      DeviceBuffer seq_lens(k.requests.seq_lens), cum(k.requests.cum);
      with.args.seq_lens = seq_lens.as<int32_t>();
      with.args.num_requests = static_cast<int32_t>(k.requests.seq_lens.size());
      if (k.requests.cum.empty()) {
        with.args.q_len = k.requests.q_len;
      } else {
        with.args.cum_seq_lens_q = cum.as<int32_t>();
        with.args.max_q_len = 1 << 20;
      }
      with.args.kernel = plain.args.kernel = Dsv4PackedKernel::kStreamH64;
      const reference::Dsv4Result ref = reference::dsv4_decode_packed(windowed.host_args(nullptr, nullptr));
      const DeviceResult got = run_device(with);
      const DeviceResult want = run_device(plain);
      EXPECT_EQ(got.out, want.out) << "seq_lens window vs the window applied to the indices";
      EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * 4), 0);
      EXPECT_EQ(got.count, want.count);
      test::expect_rows_close(got.out_values(), ref.out, config.tokens, heads, kMaxRelativeError, "vs reference");
      test::expect_lse_close(got.lse, ref.lse, 1e-3, "lse vs reference");
    }
}

// Strided q, out and lse at 64 and 128 heads (head strides past 512, token
// strides with padding): the contiguous call's bits, the padding untouched.
TEST_F(Dsv4PackedGpu, StreamH64StridedQueryAndOutput) {
  for (int heads : {64, 128}) check_padded_strides(Dsv4PackedKernel::kStreamH64, heads);
}

// PDL on, without lse or the counter (both null): out keeps the bits of
// the call with them, and the poisoned lse stays untouched.
TEST_F(Dsv4PackedGpu, StreamH64WithPdlAndWithoutLseOrCounter) {
  for (int heads : {64, 128}) {
    Dsv4PackedProblemConfig c = h64_config(test::fresh_seed(), heads, 12);
    SCOPED_TRACE(test::seed_message(c.seed) + ", H " + std::to_string(heads));
    Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
    PackedDeviceProblem device(problem);
    device.args.kernel = Dsv4PackedKernel::kStreamH64;
    const DeviceResult full = run_device(device);
    device.args.enable_pdl = true;
    device.args.lse = nullptr;
    device.args.out_of_range_count = nullptr;
    const DeviceResult lean = run_device(device);
    EXPECT_TRUE(lean.out == full.out);
    EXPECT_EQ(lean.count, kCountStart);
    const std::vector<uint32_t> poison(lean.lse.size(), 0xFFFFFFFFu);
    EXPECT_EQ(std::memcmp(lean.lse.data(), poison.data(), poison.size() * 4), 0) << "lse written without lse";
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
  const int H = problem.config.heads;
  EXPECT_EQ(std::memcmp(&alone.lse[t * H], &first.lse[t * H], H * sizeof(float)), 0)
      << "token " << t << "'s lse alone differs from the batch";
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
