// Request views and the sink term of dsv4_decode_packed on the GPU, on every
// kernel: q, both segments' indices and lens, out and lse as [B, q_len, ...]
// views whose leading dims do not merge (the kernels' general form) give
// the flat call's bits (the plain form) and leave the padding alone;
// kInOutputAndLse keeps out's bits and writes lse with the sink (the sink
// for a token without an active column); kNone is the call without sinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "support/request_views.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

using test::ViewStrides;

constexpr Dsv4PackedKernel kEveryKernel[] = {Dsv4PackedKernel::kAuto, Dsv4PackedKernel::kCluster,
                                             Dsv4PackedKernel::kStream, Dsv4PackedKernel::kSplit};

const char* name_of(Dsv4PackedKernel kernel) {
  return kernel == Dsv4PackedKernel::kAuto      ? "auto"
         : kernel == Dsv4PackedKernel::kCluster ? "cluster kernel"
         : kernel == Dsv4PackedKernel::kStream  ? "stream kernel"
                                                : "split path";
}

// A segment's indices and lens as request views on the device.
struct SegmentViews {
  DeviceBuffer indices, lens;
  ViewStrides indices_view{}, lens_view{};
};

SegmentViews segment_views(const std::vector<int32_t>& indices, int64_t stride, int32_t width,
                           const std::vector<int32_t>& lens, int64_t T, int32_t q_len) {
  SegmentViews v;
  v.indices_view = test::padded_view(stride + 4, q_len, 8);
  v.indices = DeviceBuffer(test::to_view<int32_t>(indices.data(), stride, width, T, q_len, v.indices_view, 0));
  v.lens_view = test::padded_view(3, q_len, 2);
  v.lens = DeviceBuffer(test::to_view<int32_t>(lens.data(), 1, 1, T, q_len, v.lens_view, 1 << 20));
  return v;
}

void check_views(int heads, int32_t requests, int32_t q_len, bool extra) {
  const int64_t T = int64_t{requests} * q_len;
  Dsv4PackedProblemConfig config = config_for(test::fresh_seed(), T, extra ? 512 : 0);
  config.heads = heads;
  SCOPED_TRACE(test::seed_message(config.seed) + ", H " + std::to_string(heads) + ", B " + std::to_string(requests) +
               ", q_len " + std::to_string(q_len));
  const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
  PackedDeviceProblem flat(p);
  const int64_t row = int64_t{heads} * kHeadDim;
  const ViewStrides q_view = test::interleaved_view(row + 8, requests);
  DeviceBuffer q(test::to_view<uint16_t>(p.q.data(), row, row, T, q_len, q_view, 0xFFFF));
  SegmentViews swa = segment_views(p.swa_indices, p.swa_stride(), config.swa_width, p.swa_lens, T, q_len);
  SegmentViews extra_views;
  if (extra) extra_views = segment_views(p.extra_indices, p.extra_stride(), config.extra_width, p.extra_lens, T, q_len);
  const ViewStrides out_view = test::padded_view(row + 8, q_len, 16), lse_view = test::padded_view(heads + 1, q_len, 1);
  DeviceBuffer out(test::view_extent(out_view, requests, q_len, row) * 2);
  DeviceBuffer lse(test::view_extent(lse_view, requests, q_len, heads) * 4);
  Dsv4PackedDecodeArgs views = flat.args;
  views.num_requests = requests, views.q_len = q_len;
  views.q = q.get(), views.q_token_stride = q_view.token_stride, views.q_request_stride = q_view.request_stride;
  views.swa.indices = swa.indices.as<int32_t>();
  views.swa.indices_stride = swa.indices_view.token_stride;
  views.swa.indices_request_stride = swa.indices_view.request_stride;
  views.swa.lens = swa.lens.as<int32_t>();
  views.swa.lens_token_stride = swa.lens_view.token_stride;
  views.swa.lens_request_stride = swa.lens_view.request_stride;
  if (extra) {
    views.extra.indices = extra_views.indices.as<int32_t>();
    views.extra.indices_stride = extra_views.indices_view.token_stride;
    views.extra.indices_request_stride = extra_views.indices_view.request_stride;
    views.extra.lens = extra_views.lens.as<int32_t>();
    views.extra.lens_token_stride = extra_views.lens_view.token_stride;
    views.extra.lens_request_stride = extra_views.lens_view.request_stride;
  }
  views.out = out.get(), views.out_token_stride = out_view.token_stride;
  views.out_request_stride = out_view.request_stride;
  views.lse = lse.as<float>(), views.lse_token_stride = lse_view.token_stride;
  views.lse_request_stride = lse_view.request_stride;
  const uint16_t out_poison = 0xFFFF;
  float lse_poison;
  std::memset(&lse_poison, kPoisonByte, 4);
  for (Dsv4PackedKernel kernel : kEveryKernel) {
    SCOPED_TRACE(name_of(kernel));
    flat.args.kernel = views.kernel = kernel;
    const DeviceResult want = check_against_reference(p, flat);
    out.fill_bytes(kPoisonByte), lse.fill_bytes(kPoisonByte);
    gpu_test::poison_outputs(flat.out, flat.lse, flat.out_of_range_count);
    const Status status = flat.decode(views);
    ASSERT_TRUE(status.ok()) << status.message();
    testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "views");
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

TEST_F(Dsv4PackedGpu, RequestViewsGiveTheFlatBits) {
  check_views(16, 3, 4, true);
  check_views(32, 2, 3, false);
  check_views(8, 2, 17, true);
  check_views(16, 40, 8, true);  // 320 tokens: the stream kernel alone
}

// Every kernel: kInOutputAndLse keeps out, lse with the sink against the
// reference (the sink for the emptied tokens 1, 4, ...), kNone is no sinks.
TEST_F(Dsv4PackedGpu, SinkTermEveryKernel) {
  for (int64_t tokens : {7, 200}) {
    Dsv4PackedProblemConfig config = config_for(test::fresh_seed(), tokens);
    SCOPED_TRACE(test::seed_message(config.seed) + ", T " + std::to_string(tokens));
    Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
    for (int64_t t = 1; t < tokens; t += 3) p.swa_lens[t] = 0, p.extra_lens[t] = 0;
    PackedDeviceProblem d(p);
    Dsv4PackedDecodeArgs host = p.host_args(nullptr, nullptr);
    host.sink_term = SinkTerm::kInOutputAndLse;
    const reference::Dsv4Result ref = reference::dsv4_decode_packed(host);
    for (Dsv4PackedKernel kernel : kEveryKernel) {
      SCOPED_TRACE(name_of(kernel));
      d.args.kernel = kernel;
      d.args.sink_term = SinkTerm::kInOutput;
      const DeviceResult in_output = run_device(d);
      d.args.sink_term = SinkTerm::kInOutputAndLse;
      const DeviceResult with_lse = run_device(d);
      EXPECT_EQ(with_lse.out, in_output.out) << "kInOutputAndLse changed out";
      test::expect_lse_close(with_lse.lse, ref.lse, 1e-4, "lse with the sink vs reference");
      for (int64_t t = 1; t < tokens; t += 3)
        for (int h = 0; h < config.heads; ++h) {
          EXPECT_NEAR(with_lse.lse[t * config.heads + h], p.sinks[h], 1e-6 * std::max(1.0f, std::fabs(p.sinks[h])));
        }
      d.args.sink_term = SinkTerm::kNone;
      const DeviceResult none = run_device(d);
      d.args.sink_term = SinkTerm::kInOutput;
      const float* sinks = d.args.sinks;
      d.args.sinks = nullptr;
      const DeviceResult without = run_device(d);
      d.args.sinks = sinks;
      EXPECT_EQ(none.out, without.out) << "kNone differs from the call without sinks";
      EXPECT_EQ(std::memcmp(none.lse.data(), without.lse.data(), none.lse.size() * 4), 0);
      EXPECT_NE(in_output.out, without.out) << "the sinks changed nothing: the test proves little";
    }
  }
}

// Sinks whose log2 form overflows (sink > FLT_MAX / log2(e)) outweigh every
// score: zeros, and lse the sink as given, on every kernel.
TEST_F(Dsv4PackedGpu, SinkTermHugeSinks) {
  for (int64_t tokens : {7, 200}) {
    Dsv4PackedProblemConfig config = config_for(test::fresh_seed(), tokens);
    SCOPED_TRACE(test::seed_message(config.seed) + ", T " + std::to_string(tokens));
    Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
    for (int h = 0; h < config.heads; ++h) p.sinks[h] = h % 2 ? 3.0e38f : 2.5e38f;
    for (int64_t t = 1; t < tokens; t += 3) p.swa_lens[t] = 0, p.extra_lens[t] = 0;
    PackedDeviceProblem d(p);
    d.args.sink_term = SinkTerm::kInOutputAndLse;
    for (Dsv4PackedKernel kernel : kEveryKernel) {
      SCOPED_TRACE(name_of(kernel));
      d.args.kernel = kernel;
      const DeviceResult r = run_device(d);
      for (int64_t t = 0; t < tokens; ++t)
        for (int h = 0; h < config.heads; ++h) {
          EXPECT_EQ(r.lse[t * config.heads + h], p.sinks[h]) << "token " << t << " head " << h;
          const size_t row = static_cast<size_t>(t * config.heads + h) * 512;
          for (size_t i = row; i < row + 512; ++i) ASSERT_EQ(r.out[i] & 0x7fff, 0) << "token " << t << " head " << h;
        }
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
