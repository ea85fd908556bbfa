// Any number of query tokens a request on the GPU (docs/spec.md, section 1:
// 1 up to at least 4096): seq_lens windows of requests of 17, 128, 257 and
// 4096 tokens and of varlen requests up to 257, every kernel against one
// fp64 reference, and the kernels' bits equal (checks.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/dsv4/checks.h"

namespace sparse_decode::gpu_test::dsv4 {
namespace {

// The problem with its request mapping (`edit`), on every kernel against one
// reference; the kernels' outputs equal bit for bit (64-head tiles: the
// forced cluster kernel against the reference only).
void check_long(Dsv4ProblemConfig config, const std::function<void(Dsv4DecodeArgs&, bool device)>& edit) {
  SCOPED_TRACE("seed " + std::to_string(config.seed) + ", T " + std::to_string(config.tokens) + ", q_len " +
               std::to_string(config.q_len) + ", W " + std::to_string(config.width));
  const Dsv4Problem problem = testing::make_dsv4_problem(config);
  Dsv4DeviceProblem device(problem);
  Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
  edit(device.args, true);
  edit(host, false);
  const reference::Dsv4Result ref = reference::dsv4_decode(host);
  std::vector<uint16_t> first_out;
  for (Dsv4Kernel kernel : {Dsv4Kernel::kAuto, Dsv4Kernel::kCluster, Dsv4Kernel::kStream, Dsv4Kernel::kSplit}) {
    SCOPED_TRACE(kernel == Dsv4Kernel::kAuto ? "auto" : kernel_name(kernel));
    device.args.kernel = kernel;
    device.out_of_range_count.fill_bytes(0);
    expect_matches(run_and_compare(device.args, host, ref, device.out, device.lse));
    int32_t counted = 0;
    device.out_of_range_count.download(&counted, sizeof(counted));
    EXPECT_EQ(counted, ref.out_of_range);
    if (kernel == Dsv4Kernel::kCluster && runs_64_head_tiles(device.args)) continue;
    const std::vector<uint16_t> out = device.out.download<uint16_t>();
    if (first_out.empty()) {
      first_out = out;
    } else {
      EXPECT_EQ(out, first_out) << "the kernels' outputs differ";
    }
  }
}

void check_uniform(int32_t q_len, const std::vector<int32_t>& extra, int heads, int32_t width) {
  Dsv4ProblemConfig config = config_for(int64_t{q_len} * static_cast<int64_t>(extra.size()), width);
  config.heads = heads;
  config.q_len = q_len;
  config.swa_rows = 8192;
  std::vector<int32_t> seq_lens;
  for (int32_t e : extra) seq_lens.push_back(q_len + e);
  DeviceBuffer seq_lens_device(seq_lens);
  check_long(config, [&](Dsv4DecodeArgs& args, bool device) {
    args.seq_lens = device ? seq_lens_device.as<int32_t>() : seq_lens.data();
    args.num_requests = static_cast<int32_t>(seq_lens.size());
    args.q_len = q_len;
  });
}

TEST_F(Dsv4Gpu, QueryLen17) { check_uniform(17, {3, 200, -5}, 16, 640); }
TEST_F(Dsv4Gpu, QueryLen128) { check_uniform(128, {0, 60}, 16, 640); }
TEST_F(Dsv4Gpu, QueryLen257) { check_uniform(257, {-20}, 64, 256); }  // 64-head tiles
// 4096 tokens of one request, tokens 0..59 before position 0.
TEST_F(Dsv4Gpu, QueryLen4096) { check_uniform(4096, {-60}, 8, 128); }

// Varlen requests of 17, 0, 128 and 257 tokens (max_q_len 257), BF16 too.
TEST_F(Dsv4Gpu, VarlenLongRequests) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const std::vector<int32_t> cum = {0, 17, 17, 145, 402}, seq_lens = {30, 5, 130, 557};
    Dsv4ProblemConfig config = config_for(cum.back(), 640, dtype);
    config.q_len = 257;
    DeviceBuffer cum_device(cum), seq_lens_device(seq_lens);
    check_long(config, [&](Dsv4DecodeArgs& args, bool device) {
      args.seq_lens = device ? seq_lens_device.as<int32_t>() : seq_lens.data();
      args.cum_seq_lens_q = device ? cum_device.as<int32_t>() : cum.data();
      args.num_requests = 4;
      args.max_q_len = 257;
    });
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsv4
