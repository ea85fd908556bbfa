// The seq_lens window of dsv4_decode_packed on the GPU (docs/spec.md,
// sections 1 and 2), on every kernel: the call with seq_lens (the kernels'
// general form) gives the bits of the call without seq_lens on indices with
// the window applied by hand (the plain form; support/packed_windows.h),
// and both match the fp64 reference; requests of any length, uniform and
// varlen, a 256-column window segment.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/dsv4_packed/checks.h"
#include "support/packed_windows.h"

namespace sparse_decode::gpu_test::dsv4_packed {
namespace {

void check_window(Dsv4PackedProblemConfig config, const test::PackedRequests& requests, const char* what) {
  SCOPED_TRACE(std::string(what) + ", " + test::seed_message(config.seed) + ", T " + std::to_string(config.tokens));
  const Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
  int64_t cut = 0;
  Dsv4PackedProblem windowed = p;
  windowed.swa_indices = test::windowed_swa_indices(p, requests, &cut);
  EXPECT_GT(cut, 0) << "no column is cut by the window alone: the test proves little";
  PackedDeviceProblem with(p), plain(windowed);
  DeviceBuffer seq_lens(requests.seq_lens), cum(requests.cum);
  with.args.seq_lens = seq_lens.as<int32_t>();
  with.args.num_requests = static_cast<int32_t>(requests.seq_lens.size());
  if (requests.cum.empty()) {
    with.args.q_len = requests.q_len;
  } else {
    with.args.cum_seq_lens_q = cum.as<int32_t>();
    with.args.max_q_len = 1 << 20;
  }
  // The reference of the windowed problem: the contract's window by hand.
  const reference::Dsv4Result ref = reference::dsv4_decode_packed(windowed.host_args(nullptr, nullptr));
  for (Dsv4PackedKernel kernel : {Dsv4PackedKernel::kAuto, Dsv4PackedKernel::kCluster, Dsv4PackedKernel::kStream,
                                  Dsv4PackedKernel::kSplit}) {
    SCOPED_TRACE(kernel == Dsv4PackedKernel::kAuto      ? "auto"
                 : kernel == Dsv4PackedKernel::kCluster ? "cluster kernel"
                 : kernel == Dsv4PackedKernel::kStream  ? "stream kernel"
                                                        : "split path");
    with.args.kernel = plain.args.kernel = kernel;
    const DeviceResult got = run_device(with);
    const DeviceResult want = run_device(plain);
    EXPECT_EQ(got.out, want.out) << "seq_lens window vs the window applied to the indices";
    EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * 4), 0);
    EXPECT_EQ(got.count, want.count);
    const std::vector<double> values = got.out_values();
    test::expect_rows_close(values, ref.out, config.tokens, config.heads, kMaxRelativeError, "vs reference");
    test::expect_lse_close(got.lse, ref.lse, 1e-3, "lse vs reference");
  }
}

TEST_F(Dsv4PackedGpu, SeqLensWindowUniform) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  check_window(c, {{2, 60, 130, 300}, 3, {}}, "SWA 128 + extra 512");
  c.swa_lens = false;
  c.seed = test::fresh_seed();
  check_window(c, {{5, 40, 3, 127}, 3, {}}, "no SWA lens");
}

TEST_F(Dsv4PackedGpu, SeqLensWindowWideSegmentAndVarlen) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12, 0);
  c.swa_width = 256;
  c.short_fraction = 0.0;
  check_window(c, {{3, 20, 64, 500}, 3, {}}, "SWA 256, no extra");
  c = config_for(test::fresh_seed(), 12);
  check_window(c, {{2, 3, 130, 70}, 0, {0, 1, 4, 9, 12}}, "varlen");
  check_window(c, {{9, 4, 40}, 0, {1, 3, 3, 10}}, "empty request, padding tokens");
}

// Long requests: 17, 128, 257 and 4096 tokens, and varlen of 17, 0 and 128;
// large batches run every kernel form (the stream kernel in pairs, alone).
TEST_F(Dsv4PackedGpu, SeqLensWindowLongRequests) {
  for (int32_t q_len : {17, 128, 257}) {
    Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 2 * q_len, 128);
    c.q_len = q_len;
    c.short_fraction = 0.0;
    check_window(c, {{q_len + 40, q_len - 20}, q_len, {}}, "uniform");
  }
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 4096, 0);
  c.heads = 8;
  c.q_len = 4096;
  c.short_fraction = 0.0;
  check_window(c, {{4096 - 60}, 4096, {}}, "q_len 4096");
  c = config_for(test::fresh_seed(), 145, 128);
  c.q_len = 145;
  c.short_fraction = 0.0;
  check_window(c, {{20, 7, 150}, 0, {0, 17, 17, 145}}, "varlen 17, 0, 128");
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4_packed
