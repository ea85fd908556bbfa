// Request views of dsv4_decode on the GPU (docs/spec.md, section 1,
// "Strides"): q, indices, lens, out and lse as [B, q_len, ...] views whose
// leading dims do not merge run the kernels' general form; on every kernel
// their bits equal the flat call's (the plain form), they match the fp64
// reference, and the views' padding is never written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/dsv4/checks.h"
#include "support/request_views.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

using test::ViewStrides;

struct ViewCase {
  DType dtype;
  int heads;
  int32_t requests, q_len, width;
  bool interleaved_q, lens_per_request, seq_lens;
};

void check_views(const ViewCase& c) {
  Dsv4ProblemConfig config = config_for(int64_t{c.requests} * c.q_len, c.width, c.dtype);
  config.heads = c.heads;
  config.q_len = c.q_len;
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + ", H " + std::to_string(c.heads) + ", B " +
               std::to_string(c.requests) + ", q_len " + std::to_string(c.q_len) + ", W " + std::to_string(c.width) +
               ", " + test::seed_message(config.seed));
  Dsv4Problem p = testing::make_dsv4_problem(config);
  const int64_t T = config.tokens;
  const int32_t L = c.q_len;
  if (c.lens_per_request) {  // each request's shortest lens (columns past a len may name NaN rows)
    for (int64_t first = 0; first < T; first += L) {
      const int32_t least = *std::min_element(p.lens.begin() + first, p.lens.begin() + first + L);
      std::fill_n(p.lens.begin() + first, L, least);
    }
  }
  std::vector<int32_t> seq_lens;
  for (int32_t b = 0; b < c.requests; ++b) seq_lens.push_back(L + (b % 3 == 0 ? 5 : 300));
  Dsv4DeviceProblem flat(p);
  DeviceBuffer seq_lens_device(seq_lens);
  Dsv4DecodeArgs host = p.host_args(nullptr, nullptr);
  if (c.seq_lens) {
    flat.args.seq_lens = seq_lens_device.as<int32_t>(), host.seq_lens = seq_lens.data();
    flat.args.num_requests = host.num_requests = c.requests;
    flat.args.q_len = host.q_len = L;
  }

  const int H = c.heads, W = c.width;
  const int64_t bytes = p.element_bytes(), row = int64_t{H} * kHeadDim;
  const ViewStrides q_bytes = c.interleaved_q ? test::interleaved_view(row * bytes + 64, c.requests)
                                              : test::padded_view(row * bytes + 32, L, 96);
  DeviceBuffer q(test::to_view<uint8_t>(p.q.data(), row * bytes, row * bytes, T, L, q_bytes, uint8_t{0xFF}));
  const ViewStrides indices_view = test::padded_view(W + 4, L, 8);
  DeviceBuffer indices(test::to_view<int32_t>(p.indices.data(), W, W, T, L, indices_view,
                                              static_cast<int32_t>(config.swa_rows - 1)));
  ViewStrides lens_view{0, 1};
  std::vector<int32_t> lens;
  if (c.lens_per_request) {
    for (int32_t b = 0; b < c.requests; ++b) lens.push_back(p.lens[b * L]);
  } else {
    lens_view = test::padded_view(2, L, 1);
    lens = test::to_view<int32_t>(p.lens.data(), 1, 1, T, L, lens_view, 1 << 20);
  }
  DeviceBuffer lens_device(lens);
  const ViewStrides out_view = test::padded_view(row + 16, L, 8), lse_view = test::padded_view(H + 2, L, 3);
  DeviceBuffer out(test::view_extent(out_view, c.requests, L, row) * 2);
  DeviceBuffer lse(test::view_extent(lse_view, c.requests, L, H) * 4);

  Dsv4DecodeArgs views = flat.args;
  views.q = q.get();
  views.q_token_stride = q_bytes.token_stride / bytes, views.q_request_stride = q_bytes.request_stride / bytes;
  views.indices = indices.as<int32_t>();
  views.indices_stride = indices_view.token_stride, views.indices_request_stride = indices_view.request_stride;
  views.lens = lens_device.as<int32_t>();
  views.lens_token_stride = lens_view.token_stride, views.lens_request_stride = lens_view.request_stride;
  views.out = out.get();
  views.out_token_stride = out_view.token_stride, views.out_request_stride = out_view.request_stride;
  views.lse = lse.as<float>();
  views.lse_token_stride = lse_view.token_stride, views.lse_request_stride = lse_view.request_stride;
  views.num_requests = c.requests;
  views.q_len = L;

  for (Dsv4Kernel kernel : {Dsv4Kernel::kAuto, Dsv4Kernel::kCluster, Dsv4Kernel::kStream, Dsv4Kernel::kSplit}) {
    SCOPED_TRACE(kernel == Dsv4Kernel::kAuto ? "auto" : kernel_name(kernel));
    flat.args.kernel = views.kernel = kernel;
    flat.out_of_range_count.fill_bytes(0);
    expect_matches(run_and_compare(flat.args, host, flat.out, flat.lse));
    const std::vector<uint16_t> flat_out = flat.out.download<uint16_t>();
    const std::vector<float> flat_lse = flat.lse.download<float>();
    int32_t flat_count = 0;
    flat.out_of_range_count.download(&flat_count, 4);

    out.fill_bytes(kPoisonByte), lse.fill_bytes(kPoisonByte), flat.out_of_range_count.fill_bytes(0);
    const Status status = decode(views, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "views");
    bool out_padding = false, lse_padding = false;
    const uint16_t out_poison = 0xFFFF;
    float lse_poison;
    std::memset(&lse_poison, kPoisonByte, 4);
    EXPECT_TRUE(test::from_view(out.download<uint16_t>(), row, T, L, out_view, out_poison, &out_padding) == flat_out)
        << "out through the views differs from the flat call";
    const std::vector<float> got_lse =
        test::from_view(lse.download<float>(), H, T, L, lse_view, lse_poison, &lse_padding);
    EXPECT_EQ(std::memcmp(got_lse.data(), flat_lse.data(), got_lse.size() * 4), 0) << "lse differs";
    EXPECT_TRUE(out_padding && lse_padding) << "written outside the views' rows";
    int32_t count = 0;
    flat.out_of_range_count.download(&count, 4);
    EXPECT_EQ(count, flat_count);
  }
}

TEST_F(Dsv4Gpu, RequestViewsGiveTheFlatBits) {
  check_views({DType::kFloat8E4M3, 16, 3, 4, 640, false, false, true});
  check_views({DType::kBFloat16, 16, 2, 5, 640, false, false, false});
  check_views({DType::kFloat8E4M3, 64, 2, 3, 640, false, false, true});  // 64-head tiles
  check_views({DType::kFloat8E4M3, 8, 3, 2, 2176, true, true, true});
  check_views({DType::kFloat8E4M3, 16, 1, 17, 384, true, false, true});
}

// Many tokens (the stream kernels in every form kAuto picks), request views.
TEST_F(Dsv4Gpu, RequestViewsAtLargeBatches) {
  check_views({DType::kFloat8E4M3, 16, 64, 8, 640, false, false, true});
  check_views({DType::kBFloat16, 16, 32, 16, 128, false, true, false});
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
