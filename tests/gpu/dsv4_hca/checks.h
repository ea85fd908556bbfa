// What the GPU tests of dsv4_decode_hca (SPEC section 3) share. The GPU path
// runs section 1's kernels in their page-walk form, which read the columns
// from the HCA metadata (docs/formats/hca_layout.md, "The GPU path").
// check_problem runs a problem twice on the device: dsv4_decode_hca on the
// HCA arguments, and dsv4_decode on testing::expand_to_section1 of the same
// problem (the host-side expansion, written independently). The two must
// agree bit for bit (out, lse, the counter), and both match the fp64
// reference (relative L2 <= 3e-3). FP8 only: section 3 has no BF16. Outputs
// are poisoned before every run, and so is the workspace (the split path's
// scratch, workspace_size of section 1 on the same rows). Every case draws fresh random inputs from a seed printed on failure
// (SPARSE_DECODE_TEST_SEED=<seed> replays it). Without a CUDA device every
// test reports SKIPPED.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/dsv4_hca_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "support/gpu_test_support.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_hca_problem.h"

namespace sparse_decode::gpu_test::dsv4_hca {

using testing::DeviceBuffer;
using testing::Dsv4HcaExpansion;
using testing::Dsv4HcaProblem;
using testing::Dsv4HcaProblemConfig;

inline constexpr uint8_t kWorkspacePoison = 0x55;  // index 0x55555555: past every pool here

class Dsv4HcaGpu : public gpu_test::GpuTest {};

// An HCA problem on the device: `hca` runs dsv4_decode_hca, `section1`
// dsv4_decode on the host-side expansion.
using DeviceProblem = testing::Dsv4HcaDeviceProblem;

inline void prepare_outputs(DeviceProblem& d) { gpu_test::poison_outputs(d.out, d.lse, d.out_of_range_count); }

inline DeviceResult download(const DeviceProblem& d) { return gpu_test::download_outputs(d.out, d.lse, d.out_of_range_count); }

// A workspace of `bytes` (cudaMalloc: 16-byte aligned), poisoned.
inline DeviceBuffer poisoned_workspace(size_t bytes) {
  DeviceBuffer workspace(std::max<size_t>(bytes, 16));
  workspace.fill_bytes(kWorkspacePoison);
  return workspace;
}

// dsv4_decode_hca with a poisoned workspace of workspace_size(args) bytes,
// which is section 1's workspace_size on the same rows (the expansion).
inline DeviceResult run_hca(DeviceProblem& d, cudaStream_t stream = nullptr) {
  prepare_outputs(d);
  const size_t bytes = workspace_size(d.hca);
  EXPECT_EQ(bytes, workspace_size(d.section1)) << "workspace_size: HCA vs section 1 on the same rows";
  DeviceBuffer workspace = poisoned_workspace(bytes);
  const Status status = dsv4_decode_hca(d.hca, workspace.get(), bytes, stream);
  EXPECT_TRUE(status.ok()) << status.message();
  return download(d);
}

inline DeviceResult run_section1(DeviceProblem& d) {
  prepare_outputs(d);
  const size_t bytes = workspace_size(d.section1);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  const Status status = dsv4_decode(d.section1, workspace.get(), bytes, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  return download(d);
}

inline void expect_same_bits(const DeviceResult& got, const DeviceResult& want, const char* what) {
  ASSERT_EQ(got.out.size(), want.out.size()) << what;
  size_t differing = 0, first = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    if (got.out[i] != want.out[i] && differing++ == 0) first = i;
  }
  EXPECT_EQ(differing, 0u) << what << ": first at out[" << first / kHeadDim << " (token * H + head), "
                           << first % kHeadDim << "]";
  EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * sizeof(float)), 0) << what << ": lse";
  EXPECT_EQ(got.count, want.count) << what << ": out_of_range_count";
}

// One device result against the fp64 reference: every element finite,
// relative L2 <= 3e-3, exact zeros and lse = -inf for tokens with nothing
// active, lse within 1e-3, the counter.
inline void expect_matches_reference(const DeviceResult& got, const reference::Dsv4Result& ref, int64_t T, int H,
                              const char* what) {
  double err2 = 0.0, ref2 = 0.0, lse_error = 0.0;
  int64_t non_finite = 0, nonzero_in_empty = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const size_t row = static_cast<size_t>(t * H + h);
      const bool empty = std::isinf(ref.lse[row]) && ref.lse[row] < 0;
      for (int d = 0; d < kHeadDim; ++d) {
        const double value = reference::decode_bf16(got.out[row * kHeadDim + d]);
        const double expected = ref.out[row * kHeadDim + d];
        non_finite += !std::isfinite(value);
        nonzero_in_empty += empty && value != 0.0;
        err2 += (value - expected) * (value - expected);
        ref2 += expected * expected;
      }
      const double l = got.lse[row], e = ref.lse[row];
      const double error = std::isnan(l)   ? 1e300
                           : std::isinf(e) ? (l == e ? 0.0 : std::numeric_limits<double>::infinity())
                                           : std::fabs(l - e) / std::max(1.0, std::fabs(e));
      lse_error = std::max(lse_error, error);
    }
  }
  const double relative = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(relative, kMaxRelativeError) << what;
  EXPECT_EQ(non_finite, 0) << what;
  EXPECT_EQ(nonzero_in_empty, 0) << what;
  EXPECT_LE(lse_error, 1e-3) << what;
  EXPECT_EQ(got.count, kCountStart + ref.out_of_range) << what << ": out_of_range_count";
}

// The whole check of a problem: HCA on the device equals section 1 on the
// expansion, bit for bit, and both match the reference. Returns the HCA result.
inline DeviceResult check_problem(const Dsv4HcaProblem& p) {
  DeviceProblem d(p);
  const DeviceResult hca = run_hca(d);
  const DeviceResult section1 = run_section1(d);
  expect_same_bits(hca, section1, "dsv4_decode_hca vs dsv4_decode on the expansion");
  const reference::Dsv4Result ref = reference::dsv4_decode_hca(p.host_args(nullptr, nullptr));
  expect_matches_reference(hca, ref, p.config.tokens, p.config.heads, "dsv4_decode_hca vs the reference");
  expect_matches_reference(section1, ref, p.config.tokens, p.config.heads, "dsv4_decode vs the reference");
  return hca;
}

// A small problem (16 heads); max_pages keeps the compressed stream near 300 slots.
inline Dsv4HcaProblemConfig small_config(uint64_t seed, int64_t page_size) {
  Dsv4HcaProblemConfig c;
  c.seed = seed;
  c.page_size = page_size;
  c.heads = 16;
  c.tokens = 6;
  c.q_len = 3;
  c.max_pages = static_cast<int32_t>(std::max<int64_t>(1, 300 / page_size));
  c.compressed_pages = c.max_pages * 2;
  return c;
}

inline constexpr int64_t kPageSizes[] = {1, 2, 61, 64, 256};

// small_config with T tokens of uniform q_len.
inline Dsv4HcaProblem batch_problem(uint64_t seed, int64_t page_size, int64_t tokens, int32_t q_len) {
  Dsv4HcaProblemConfig c = small_config(seed, page_size);
  c.tokens = tokens;
  c.q_len = q_len;
  return testing::make_dsv4_hca_problem(c);
}

}  // namespace sparse_decode::gpu_test::dsv4_hca
