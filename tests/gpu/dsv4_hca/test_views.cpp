// Request views and the sink term of dsv4_decode_hca on the GPU: q, out and
// lse, and the metadata (swa_rows, swa_lens, block_table, lens), as [B,
// q_len, ...] views whose leading dims do not merge give the bits of the
// flat call and leave the padding alone; kInOutputAndLse keeps out's bits
// and writes lse with the sink, against the fp64 reference; kNone is the
// call without sinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/dsv4_hca/checks.h"
#include "support/hca_metadata_views.h"
#include "support/request_views.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsv4_hca {
namespace {

using test::ViewStrides;

TEST_F(Dsv4HcaGpu, RequestViewsGiveTheFlatBits) {
  for (int64_t tokens : {12, 400}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + ", T " + std::to_string(tokens));
    const Dsv4HcaProblem p = batch_problem(seed, 64, tokens, 4);
    DeviceProblem d(p);
    const DeviceResult flat = run_hca(d);
    const int64_t T = tokens, B = T / 4, H = p.config.heads, row = H * kHeadDim;
    const ViewStrides q_view = test::padded_view(row + 16, 4, 48);
    DeviceBuffer q(test::to_view<uint8_t>(p.q.data(), row, row, T, 4, q_view, 0xFF));
    const ViewStrides out_view = test::padded_view(row, 4, 24), lse_view = test::padded_view(H, 4, 5);
    DeviceBuffer out(test::view_extent(out_view, B, 4, row) * 2), lse(test::view_extent(lse_view, B, 4, H) * 4);
    Dsv4HcaDecodeArgs views = d.hca;
    views.q = q.get(), views.q_token_stride = q_view.token_stride, views.q_request_stride = q_view.request_stride;
    views.out = out.get(), views.out_token_stride = out_view.token_stride;
    views.out_request_stride = out_view.request_stride;
    views.lse = lse.as<float>(), views.lse_token_stride = lse_view.token_stride;
    views.lse_request_stride = lse_view.request_stride;
    out.fill_bytes(kPoisonByte), lse.fill_bytes(kPoisonByte);
    gpu_test::poison_outputs(d.out, d.lse, d.out_of_range_count);
    const size_t bytes = workspace_size(views);
    DeviceBuffer workspace = poisoned_workspace(bytes);
    const Status status = dsv4_decode_hca(views, workspace.get(), bytes, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "views");
    float lse_poison;
    std::memset(&lse_poison, kPoisonByte, 4);
    bool out_padding = false, lse_padding = false;
    EXPECT_TRUE(test::from_view(out.download<uint16_t>(), row, T, 4, out_view, uint16_t{0xFFFF}, &out_padding) ==
                flat.out);
    const std::vector<float> got_lse =
        test::from_view(lse.download<float>(), H, T, 4, lse_view, lse_poison, &lse_padding);
    EXPECT_EQ(std::memcmp(got_lse.data(), flat.lse.data(), got_lse.size() * 4), 0);
    EXPECT_TRUE(out_padding && lse_padding) << "written outside the views' rows";
    int32_t count = 0;
    d.out_of_range_count.download(&count, 4);
    EXPECT_EQ(count, flat.count);
  }
}

// The metadata through views, with flat q and out (the views alone make
// the page walk address tokens by request) and with out a view too; every
// kernel family (T 12: cluster; 400: stream and split; 16 and 64 heads).
// The flat call is first checked against section 1 on the expansion, so
// that the comparison cannot pass on a broken flat result; the padding of
// the metadata names NaN rows, and out's padding is poisoned and checked.
TEST_F(Dsv4HcaGpu, MetadataViewsGiveTheFlatBits) {
  for (int32_t heads : {16, 64}) {
    for (int64_t tokens : {12, 400}) {
      for (bool interleaved : {false, true}) {
        const uint64_t seed = test::fresh_seed();
        SCOPED_TRACE(test::seed_message(seed) + ", H " + std::to_string(heads) + ", T " + std::to_string(tokens) +
                     (interleaved ? ", interleaved" : ", padded"));
        Dsv4HcaProblemConfig c = small_config(seed, 32);
        c.heads = heads, c.tokens = tokens, c.q_len = 4;
        const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
        DeviceProblem d(p);
        const DeviceResult flat = run_hca(d);
        expect_same_bits(flat, run_section1(d), "flat dsv4_decode_hca vs dsv4_decode on the expansion");
        if (tokens <= 12) {
          const reference::Dsv4Result ref = reference::dsv4_decode_hca(p.host_args(nullptr, nullptr));
          expect_matches_reference(flat, ref, tokens, heads, "flat dsv4_decode_hca vs the reference");
        }

        const test::HcaMetadataViews m(p, interleaved);
        DeviceBuffer rows(m.swa_rows), window(m.swa_lens), table(m.block_table), lens(m.lens);
        const int32_t* device[] = {rows.as<int32_t>(), window.as<int32_t>(), table.as<int32_t>(), lens.as<int32_t>()};
        Dsv4HcaDecodeArgs views = d.hca;
        m.apply(views, device);
        ASSERT_TRUE(validate(views).ok()) << validate(views).message();
        const size_t bytes = workspace_size(views);
        EXPECT_EQ(bytes, workspace_size(d.hca)) << "workspace_size: views vs flat";

        // Flat out (d.out), then out as a padded view.
        DeviceBuffer workspace = poisoned_workspace(bytes);
        prepare_outputs(d);
        Status status = dsv4_decode_hca(views, workspace.get(), bytes, nullptr);
        ASSERT_TRUE(status.ok()) << status.message();
        expect_same_bits(download(d), flat, "metadata views, flat out");

        const int64_t B = tokens / 4, row = int64_t{heads} * kHeadDim;
        const test::ViewStrides out_view = test::padded_view(row, 4, 40);
        DeviceBuffer out(test::view_extent(out_view, B, 4, row) * 2);
        out.fill_bytes(kPoisonByte);
        views.out = out.get(), views.out_token_stride = out_view.token_stride;
        views.out_request_stride = out_view.request_stride;
        prepare_outputs(d);
        workspace.fill_bytes(kWorkspacePoison);
        status = dsv4_decode_hca(views, workspace.get(), bytes, nullptr);
        ASSERT_TRUE(status.ok()) << status.message();
        testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "metadata views");
        bool out_padding = false;
        EXPECT_TRUE(test::from_view(out.download<uint16_t>(), row, tokens, 4, out_view, uint16_t{0xFFFF},
                                    &out_padding) == flat.out);
        EXPECT_TRUE(out_padding) << "written outside out's view";
        const DeviceResult with_out_view = download(d);
        EXPECT_EQ(std::memcmp(with_out_view.lse.data(), flat.lse.data(), flat.lse.size() * 4), 0) << "lse";
        EXPECT_EQ(with_out_view.count, flat.count) << "out_of_range_count";
      }
    }
  }
}

TEST_F(Dsv4HcaGpu, SinkTerm) {
  for (int64_t tokens : {6, 300}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + ", T " + std::to_string(tokens));
    Dsv4HcaProblem p = batch_problem(seed, 64, tokens, 3);
    for (int64_t t = 1; t < tokens; t += 4) p.swa_lens[t] = 0, p.lens[t] = 0;  // nothing active
    DeviceProblem d(p);
    const DeviceResult in_output = run_hca(d);
    d.hca.sink_term = SinkTerm::kInOutputAndLse;
    const DeviceResult with_lse = run_hca(d);
    Dsv4HcaDecodeArgs host = p.host_args(nullptr, nullptr);
    host.sink_term = SinkTerm::kInOutputAndLse;
    expect_matches_reference(with_lse, reference::dsv4_decode_hca(host), tokens, p.config.heads, "kInOutputAndLse");
    EXPECT_EQ(with_lse.out, in_output.out) << "kInOutputAndLse changed out";
    for (int64_t t = 1; t < tokens; t += 4)
      for (int h = 0; h < p.config.heads; ++h) {
        EXPECT_NEAR(with_lse.lse[t * p.config.heads + h], p.sinks[h], 1e-6 * std::max(1.0f, std::fabs(p.sinks[h])));
      }
    d.hca.sink_term = SinkTerm::kNone;
    const DeviceResult none = run_hca(d);
    d.hca.sink_term = SinkTerm::kInOutput;
    d.hca.sinks = nullptr;
    const DeviceResult without = run_hca(d);
    expect_same_bits(none, without, "kNone vs no sinks");
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_hca
