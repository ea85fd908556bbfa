// What the GPU tests of dsv4_decode_packed (SPEC section 2) share: the
// fixtures, a problem on the device with a workspace for the split path, and
// check_config, which runs a problem under kAuto and on each kernel forced,
// each against the fp64 reference. Without a CUDA device every test reports
// SKIPPED. Every case draws fresh random inputs from a seed printed on
// failure (SPARSE_DECODE_TEST_SEED=<seed> replays it).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/dsv4_packed_reference.h"
#include "sparse_decode/dsv4_decode_packed.h"
#include "support/dsv4_packed_checks.h"
#include "support/gpu_test_support.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode::gpu_test::dsv4_packed {

using testing::DeviceBuffer;
using testing::Dsv4PackedProblem;
using testing::Dsv4PackedProblemConfig;

class Dsv4PackedGpu : public gpu_test::GpuTest {};
// The tests that run once a kernel, forced (kCluster, kStream, kSplit):
// instantiated for every kernel in test_kernels.cpp.
class Dsv4PackedGpuKernels : public Dsv4PackedGpu, public ::testing::WithParamInterface<Dsv4PackedKernel> {};

// A packed problem on the device (testing::Dsv4PackedDeviceProblem) with a
// workspace large enough for the split path at its T.
struct PackedDeviceProblem : testing::Dsv4PackedDeviceProblem {
  explicit PackedDeviceProblem(const Dsv4PackedProblem& p) : testing::Dsv4PackedDeviceProblem(p) {
    // Room for the 16-head split path forced and for kAuto's choice (the 64-head split path at 64 and 128 heads).
    Dsv4PackedDecodeArgs split = args;
    split.kernel = Dsv4PackedKernel::kSplit;
    workspace = DeviceBuffer(std::max<size_t>({workspace_size(split), workspace_size(args), 16}));
    workspace.fill_bytes(kPoisonByte);  // shares are written before they are read: NaN otherwise
  }
  // The call with this problem's workspace.
  Status decode(const Dsv4PackedDecodeArgs& call, cudaStream_t stream = nullptr) {
    return dsv4_decode_packed(call, workspace.get(), workspace.bytes(), stream);
  }
  DeviceBuffer workspace;
};

// Poisons out and lse, sets the counter, runs the call and downloads.
inline DeviceResult run_device(PackedDeviceProblem& d) {
  gpu_test::poison_outputs(d.out, d.lse, d.out_of_range_count);
  EXPECT_LE(workspace_size(d.args), d.workspace.bytes());
  const Status status = d.decode(d.args);
  EXPECT_TRUE(status.ok()) << status.message();
  return gpu_test::download_outputs(d.out, d.lse, d.out_of_range_count);
}

// Per scale tile (64 dims) over all tokens and heads (as the Python tests): a wrong
// scale of a small tile shows there even where a row's norm hides it.
inline void expect_close_by_scale_tile(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  for (int g = 0; g < kHeadDim / kPackedTileDims; ++g) {
    double error = 0.0, norm = 0.0;
    for (size_t row = 0; row < want.size() / kHeadDim; ++row) {
      for (int d = g * kPackedTileDims; d < (g + 1) * kPackedTileDims; ++d) {
        const double diff = got[row * kHeadDim + d] - want[row * kHeadDim + d];
        error += diff * diff, norm += want[row * kHeadDim + d] * want[row * kHeadDim + d];
      }
    }
    if (norm > 0.0) EXPECT_LE(std::sqrt(error / norm), tolerance) << "dims " << g * 64 << "..+63";
  }
}

enum class GroupCheck { kEachRow, kOverRows };

// The device against the reference of the same problem and sink term on the
// host: every element written and finite, relative L2 error per (token,
// head) and per scale tile (64 dims), exact zeros for tokens with no active
// column, lse, counter.
inline DeviceResult check_against_reference(const Dsv4PackedProblem& problem, PackedDeviceProblem& device,
                                     GroupCheck groups = GroupCheck::kEachRow) {
  const DeviceResult got = run_device(device);
  Dsv4PackedDecodeArgs host = problem.host_args(nullptr, nullptr);
  host.q_token_stride = device.args.q_token_stride;
  host.q_head_stride = device.args.q_head_stride;
  host.sink_term = device.args.sink_term;  // kInOutputAndLse: lse with the sink
  const reference::Dsv4Result ref = reference::dsv4_decode_packed(host);
  const int64_t T = problem.config.tokens;
  const int H = problem.config.heads;
  const std::vector<double> values = got.out_values();
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }))
      << "NaN/inf in out: a masked NaN row leaked or an element was not written";
  test::expect_rows_close(values, ref.out, T, H, kMaxRelativeError, "device out vs reference");
  if (groups == GroupCheck::kEachRow) {
    test::expect_scale_tiles_close(values, ref.out, H, kMaxRelativeError, "device out vs reference, by scale tile");
  } else {
    expect_close_by_scale_tile(values, ref.out, kMaxRelativeError);
  }
  test::expect_lse_close(got.lse, ref.lse, 1e-3, "device lse vs reference");
  EXPECT_EQ(got.count, kCountStart + ref.out_of_range);
  return got;
}

inline Dsv4PackedProblemConfig config_for(uint64_t seed, int64_t tokens, int32_t extra_width = 512, int64_t page_size = 64) {
  Dsv4PackedProblemConfig c;
  c.seed = seed;
  c.tokens = tokens;
  c.q_len = static_cast<int32_t>(std::min<int64_t>(tokens, 6));
  c.extra_width = extra_width;
  c.page_size = page_size;
  c.extra_rows = 8192;
  return c;
}

// Builds the problem, lets `edit` change it, checks each kernel (kAuto, then
// the cluster kernel, the stream kernel and the split path forced) against the reference; returns kAuto's result.
inline DeviceResult check_config(const Dsv4PackedProblemConfig& config,
                          const std::function<void(Dsv4PackedProblem&)>& edit = {},
                          GroupCheck groups = GroupCheck::kEachRow) {
  SCOPED_TRACE(test::seed_message(config.seed) + ", T " + std::to_string(config.tokens) + ", H " +
               std::to_string(config.heads) + ", widths " + std::to_string(config.swa_width) + "+" +
               std::to_string(config.extra_width) + ", page size " + std::to_string(config.page_size));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(config);
  if (edit) edit(problem);
  PackedDeviceProblem device(problem);
  const DeviceResult automatic = check_against_reference(problem, device, groups);
  for (Dsv4PackedKernel kernel : {Dsv4PackedKernel::kCluster, Dsv4PackedKernel::kStream, Dsv4PackedKernel::kSplit}) {
    SCOPED_TRACE(kernel == Dsv4PackedKernel::kCluster  ? "cluster kernel"
                 : kernel == Dsv4PackedKernel::kStream ? "stream kernel"
                                                 : "split path");
    device.args.kernel = kernel;
    check_against_reference(problem, device, groups);
  }
  device.args.kernel = Dsv4PackedKernel::kAuto;
  return automatic;
}

}  // namespace sparse_decode::gpu_test::dsv4_packed
