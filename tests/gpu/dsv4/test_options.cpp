// The optional arguments of dsv4_decode on the GPU: bmm scales from device
// pointers, seq_lens windows (uniform and varlen requests), paged pools with
// gaps and wide rows, strided q, out and lse, PDL without lse; every kernel
// against the fp64 reference (checks.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/dsv4/checks.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

TEST_F(Dsv4Gpu, ScalesFromDevicePointers) {
  Dsv4ProblemConfig config = config_for(6, 640);
  const std::vector<float> scales = {0.03f, 1.7f};
  DeviceBuffer device_scales(scales);
  const float* bmm1 = device_scales.as<float>();
  check_problem(config, {}, [&](Dsv4DecodeArgs& args) {
    // Host args read the host copy, device args the device copy.
    const bool device = args.memory == MemorySpace::kDevice;
    args.bmm1_scale.device = device ? bmm1 : &scales[0];
    args.bmm2_scale.device = device ? bmm1 + 1 : &scales[1];
  });
}

// SWA columns past min(128, position + 1) are masked; seq_lens below the
// query length (a negative position) mask every SWA column.
TEST_F(Dsv4Gpu, SeqLensWindowUniformQueryLength) {
  for (int32_t width : {640, 2176}) {
    Dsv4ProblemConfig config = config_for(12, width);
    config.q_len = 3;
    const std::vector<int32_t> seq_lens = {1, 5, 60, 400};
    DeviceBuffer seq_lens_device(seq_lens);
    check_problem(config, {}, [&](Dsv4DecodeArgs& args) {
      const bool device = args.memory == MemorySpace::kDevice;
      args.seq_lens = device ? seq_lens_device.as<int32_t>() : seq_lens.data();
      args.num_requests = 4;
      args.q_len = 3;
    });
  }
}

TEST_F(Dsv4Gpu, SeqLensWindowVarlen) { check_four_varlen_requests(DType::kFloat8E4M3, false); }

// 700 requests of 0 to 3 tokens (empty ones included): the request search
// of the kernels goes through its pivots (700 > 256 threads).
TEST_F(Dsv4Gpu, SeqLensWindowVarlenManyRequests) {
  Dsv4ProblemConfig config = config_for(0, 640);
  std::mt19937 rng(static_cast<uint32_t>(config.seed));
  std::vector<int32_t> cum_seq_lens_q = {0}, seq_lens;
  for (int b = 0; b < 700; ++b) {
    const int32_t q_len = static_cast<int32_t>(rng() % 4);
    cum_seq_lens_q.push_back(cum_seq_lens_q.back() + q_len);
    seq_lens.push_back(q_len + static_cast<int32_t>(rng() % 200));
  }
  config.tokens = cum_seq_lens_q.back();
  config.q_len = 16;
  check_varlen_requests(config, cum_seq_lens_q, seq_lens, 3);
}

TEST_F(Dsv4Gpu, PagedPoolsWithGapsAndWideRows) {
  for (int64_t page_size : {1, 2, 61, 64}) check_paged_pools_with_gaps(page_size, DType::kFloat8E4M3);
}

TEST_F(Dsv4Gpu, StridedQueryAndOutput) {
  for (int32_t heads : {16, 8, 32, 64, 128})
    for (Dsv4Kernel kernel : kKernels) {
      Dsv4ProblemConfig config = config_for(6, 640);
      config.heads = heads;
      SCOPED_TRACE(std::string(kernel_name(kernel)) + ", H " + std::to_string(heads) + ", seed " +
                   std::to_string(config.seed));
      Dsv4Problem problem = testing::make_dsv4_problem(config);
      // q with a head stride of 1024 and a token stride of 140000 elements; out likewise padded.
      const int H = config.heads;
      const int64_t q_head = 1024, q_token = 140000, out_head = 640, out_token = H * 640 + 64, lse_token = 160;
      std::vector<uint8_t> q(static_cast<size_t>(config.tokens) * q_token, 0x7F);
      for (int64_t t = 0; t < config.tokens; ++t)
        for (int h = 0; h < H; ++h)
          std::memcpy(&q[t * q_token + h * q_head], &problem.q[(t * H + h) * kHeadDim], kHeadDim);
      Dsv4DeviceProblem device(problem);
      DeviceBuffer q_device(q), out(static_cast<size_t>(config.tokens) * out_token * 2),
          lse(config.tokens * lse_token * 4);
      Dsv4DecodeArgs args = device.args;
      args.kernel = kernel;
      args.q = q_device.get();
      args.q_token_stride = q_token;
      args.q_head_stride = q_head;
      args.out = out.get();
      args.out_token_stride = out_token;
      args.out_head_stride = out_head;
      args.lse = lse.as<float>();
      args.lse_token_stride = lse_token;
      Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
      Dsv4DecodeArgs host_strided = host;
      host_strided.q = q.data();
      host_strided.q_token_stride = q_token;
      host_strided.q_head_stride = q_head;
      host_strided.out_token_stride = out_token;
      host_strided.out_head_stride = out_head;
      host_strided.lse_token_stride = lse_token;
      expect_matches(run_and_compare(args, host_strided, out, lse));
      // The padding between heads and tokens (out and lse) is never written.
      std::vector<uint16_t> got(out.bytes() / 2);
      out.download(got.data(), out.bytes());
      for (int64_t t = 0; t < config.tokens; ++t)
        for (int h = 0; h < H; ++h)
          for (int d = kHeadDim; d < out_head && h * out_head + d < out_token; ++d)
            ASSERT_EQ(got[t * out_token + h * out_head + d], 0xFFFF);
      const std::vector<uint32_t> got_lse = lse.download<uint32_t>();
      for (int64_t t = 0; t < config.tokens; ++t)
        for (int64_t i = H; i < lse_token; ++i) ASSERT_EQ(got_lse[t * lse_token + i], 0xFFFFFFFFu);
    }
}

TEST_F(Dsv4Gpu, WithPdlAndWithoutLse) {
  Dsv4ProblemConfig config = config_for(12, 640);
  check_problem(config, {}, [](Dsv4DecodeArgs& args) {
    args.enable_pdl = true;
    args.lse = nullptr;
  });
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
