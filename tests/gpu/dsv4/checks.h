// What the dsv4 GPU tests share: the fixture (every test reports SKIPPED
// without a CUDA device), a dsv4_decode run compared with the fp64 reference,
// and check_problem, which runs a problem on every kernel (cluster, stream and
// split), checks each against the reference and compares their bits (but the
// forced cluster kernel of calls that run 64-head tiles: runs_64_head_tiles).
// Problems are FP8 unless a test says BF16; each draws its inputs from a seed
// printed on failure (SPARSE_DECODE_TEST_SEED=<seed> replays it).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "support/gpu_test_support.h"
#include "support/test_support.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode::gpu_test::dsv4 {

using testing::DeviceBuffer;
using testing::Dsv4DeviceProblem;
using testing::Dsv4Problem;
using testing::Dsv4ProblemConfig;

class Dsv4Gpu : public gpu_test::GpuTest {};

struct Comparison {
  double relative_error = 0.0;
  int64_t non_finite = 0;
  int64_t nonzero_in_empty_tokens = 0;
  double max_lse_error = 0.0;
};

// Tokens with no active column, from the reference's own masking rule.
inline std::vector<bool> empty_tokens(const Dsv4DecodeArgs& host) {
  std::vector<bool> empty(host.num_tokens, true);
  for (int64_t t = 0; t < host.num_tokens; ++t)
    for (int32_t c = 0; c < host.width && empty[t]; ++c) empty[t] = !reference::dsv4_column(host, t, c).active;
  return empty;
}

// A device workspace of at least `bytes` (16-byte aligned: cudaMalloc), kept
// for the rest of the run so that calls need no allocation of their own.
inline void* workspace_of(size_t bytes) {
  static DeviceBuffer* workspace = nullptr;
  if (!workspace || workspace->bytes() < bytes) {
    delete workspace;
    workspace = new DeviceBuffer(std::max<size_t>(bytes, 1));
  }
  return workspace->get();
}

// dsv4_decode with the workspace it asks for.
inline Status decode(const Dsv4DecodeArgs& args, cudaStream_t stream) {
  const size_t bytes = workspace_size(args);
  return dsv4_decode(args, workspace_of(bytes), bytes, stream);
}

// Runs `args` (device) after poisoning out and lse, and compares with `ref`,
// the reference of `host` (same problem over host pointers).
inline Comparison run_and_compare(const Dsv4DecodeArgs& args, const Dsv4DecodeArgs& host,
                                  const reference::Dsv4Result& ref, DeviceBuffer& out, DeviceBuffer& lse,
                                  int64_t* device_out_of_range = nullptr) {
  out.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  const Status status = decode(args, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "kernel");

  const int H = host.num_heads;
  std::vector<uint16_t> got(out.bytes() / 2);
  out.download(got.data(), out.bytes());
  std::vector<float> got_lse(lse.bytes() / 4);
  lse.download(got_lse.data(), lse.bytes());
  const std::vector<bool> empty = empty_tokens(host);

  Comparison result;
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t t = 0; t < host.num_tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < kHeadDim; ++d) {
        const double value = reference::decode_bf16(got[t * args.out_token_stride + h * args.out_head_stride + d]);
        const double expected = ref.out[(t * H + h) * kHeadDim + d];
        if (!std::isfinite(value)) ++result.non_finite;
        if (empty[t] && value != 0.0) ++result.nonzero_in_empty_tokens;
        err2 += (value - expected) * (value - expected);
        ref2 += expected * expected;
      }
      if (args.lse) {
        const double l = got_lse[t * args.lse_token_stride + h], e = ref.lse[t * H + h];
        const double error = std::isinf(e) ? (l == e ? 0.0 : std::numeric_limits<double>::infinity())
                                           : std::fabs(l - e) / std::max(1.0, std::fabs(e));
        result.max_lse_error = std::max(result.max_lse_error, std::isnan(l) ? 1e300 : error);
      }
    }
  }
  result.relative_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (device_out_of_range) *device_out_of_range = ref.out_of_range;
  return result;
}

// The same with the reference of `host` computed here.
inline Comparison run_and_compare(const Dsv4DecodeArgs& args, const Dsv4DecodeArgs& host, DeviceBuffer& out,
                                  DeviceBuffer& lse, int64_t* device_out_of_range = nullptr) {
  return run_and_compare(args, host, reference::dsv4_decode(host), out, lse, device_out_of_range);
}

inline void expect_matches(const Comparison& c) {
  EXPECT_LE(c.relative_error, kMaxRelativeError);
  EXPECT_EQ(c.non_finite, 0);
  EXPECT_EQ(c.nonzero_in_empty_tokens, 0);
  EXPECT_LE(c.max_lse_error, 1e-3);
}

inline constexpr Dsv4Kernel kKernels[] = {Dsv4Kernel::kCluster, Dsv4Kernel::kStream, Dsv4Kernel::kSplit};

inline const char* kernel_name(Dsv4Kernel kernel) {
  return kernel == Dsv4Kernel::kCluster ? "cluster" : kernel == Dsv4Kernel::kSplit ? "split" : "stream";
}

// Whether the stream kernel and the split path of a call run 64-head tiles
// (docs/kernels/heads64.md: FP8, H = 64 or 128, W <= 1024). The cluster
// kernel keeps 16-head groups: forced on such a call it gives other bits
// (kAuto never picks it there).
inline bool runs_64_head_tiles(const Dsv4DecodeArgs& args) {
  return args.dtype == DType::kFloat8E4M3 && args.num_heads % 64 == 0 && args.width <= 1024;
}

// Builds a problem, lets `edit` change it, and checks each kernel against the
// reference, its out-of-range count, and that the kernels give the same bits
// (the forced cluster kernel of a 64-head-tile call: the reference only).
inline void check_problem(Dsv4ProblemConfig config, const std::function<void(Dsv4Problem&)>& edit = {},
                   const std::function<void(Dsv4DecodeArgs&)>& edit_args = {}) {
  SCOPED_TRACE("seed " + std::to_string(config.seed) + ", T " + std::to_string(config.tokens) + ", W " +
               std::to_string(config.width));
  Dsv4Problem problem = testing::make_dsv4_problem(config);
  if (edit) edit(problem);
  Dsv4DeviceProblem device(problem);
  Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
  if (edit_args) edit_args(device.args), edit_args(host);
  std::vector<uint16_t> first_out;
  std::vector<uint32_t> first_lse;
  for (Dsv4Kernel kernel : kKernels) {
    SCOPED_TRACE(kernel_name(kernel));
    device.args.kernel = kernel;
    device.out_of_range_count.fill_bytes(0);
    int64_t expected_out_of_range = 0;
    expect_matches(run_and_compare(device.args, host, device.out, device.lse, &expected_out_of_range));
    int32_t counted = 0;
    device.out_of_range_count.download(&counted, sizeof(counted));
    EXPECT_EQ(counted, expected_out_of_range);
    if (kernel == Dsv4Kernel::kCluster && runs_64_head_tiles(device.args)) continue;
    std::vector<uint16_t> out = device.out.download<uint16_t>();
    std::vector<uint32_t> lse = device.lse.download<uint32_t>();
    if (first_out.empty()) {
      first_out = out, first_lse = lse;
    } else {
      EXPECT_EQ(out, first_out) << "the kernels' outputs differ";
      if (device.args.lse) EXPECT_EQ(lse, first_lse) << "the kernels' lse differ";
    }
  }
}

inline Dsv4ProblemConfig config_for(int64_t tokens, int32_t width, DType dtype = DType::kFloat8E4M3) {
  Dsv4ProblemConfig config;
  config.tokens = tokens;
  config.width = width;
  config.dtype = dtype;
  config.seed = test::fresh_seed();
  return config;
}

inline const char* dtype_name(DType dtype) { return dtype == DType::kBFloat16 ? "BF16" : "FP8"; }

// Pools of `page_size`-row pages, 48 unused elements after each page, rows
// 32 elements wider than their 512 values.
inline void check_paged_pools_with_gaps(int64_t page_size, DType dtype) {
  Dsv4ProblemConfig config = config_for(6, 640, dtype);
  config.page_size = page_size;
  config.swa_rows = 61 * 64;
  config.compressed_rows = 61 * 128;
  config.row_stride = 512 + 32;
  config.page_gap = 48;
  check_problem(config);
}

// Checks a problem whose tokens are split into varlen requests
// (cum_seq_lens_q) with their own seq_lens.
inline void check_varlen_requests(const Dsv4ProblemConfig& config, const std::vector<int32_t>& cum_seq_lens_q,
                           const std::vector<int32_t>& seq_lens, int32_t max_q_len, bool enable_pdl = false) {
  DeviceBuffer cum_device(cum_seq_lens_q), seq_lens_device(seq_lens);
  check_problem(config, {}, [&](Dsv4DecodeArgs& args) {
    const bool device = args.memory == MemorySpace::kDevice;
    args.seq_lens = device ? seq_lens_device.as<int32_t>() : seq_lens.data();
    args.cum_seq_lens_q = device ? cum_device.as<int32_t>() : cum_seq_lens_q.data();
    args.num_requests = static_cast<int32_t>(seq_lens.size());
    args.max_q_len = max_q_len;
    args.enable_pdl = enable_pdl;
  });
}

// 12 tokens in 4 varlen requests of 1, 3, 5 and 3 tokens, seq_lens 2, 3, 130
// and 70: the first two cut every token's SWA window short.
inline void check_four_varlen_requests(DType dtype, bool enable_pdl, int32_t heads = 16) {
  Dsv4ProblemConfig config = config_for(12, 640, dtype);
  config.heads = heads;
  config.q_len = 12;  // one SWA window for all tokens; the requests below split them
  check_varlen_requests(config, {0, 1, 4, 9, 12}, {2, 3, 130, 70}, 5, enable_pdl);
}

// Shorter lens for every token and SWA holes in every 5th (columns past the
// generated lens name NaN rows, so lens only shrink).
inline void shorten_lens_and_punch_holes(Dsv4Problem& p) {
  std::mt19937 rng(static_cast<uint32_t>(p.config.seed));
  for (auto& len : p.lens) len = static_cast<int32_t>(rng() % (len + 1));
  for (int64_t t = 0; t < p.config.tokens; t += 5) {
    for (int c = 0; c < kSwaColumns; c += 3) p.indices[t * p.config.width + c] = -1;
  }
}

}  // namespace sparse_decode::gpu_test::dsv4
