// What the GPU tests of merge_states share (SPEC section 5,
// docs/kernels/merge.md): a merge case on the device (support/merge_checks.h:
// NaN in every partial of an empty rank and in the head padding, so that
// using either shows), a run with poisoned outputs, and check_merge, which
// compares a run with the fp64 reference on the same inputs:
// - relative L2 <= 3e-3 (BF16 out) or 1e-5 (float32 out), every element finite;
// - head rows empty on every rank: +0.0 bits and lse -inf;
// - lse within 1e-5 (relative above 1).
// Every case draws fresh random inputs from a seed printed on failure
// (SPARSE_DECODE_TEST_SEED=<seed> replays it); without a CUDA device every
// test reports SKIPPED.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/merge_reference.h"
#include "sparse_decode/merge_states.h"
#include "support/gpu_test_support.h"
#include "support/merge_checks.h"
#include "support/test_support.h"
#include "testing/device_buffer.h"

namespace sparse_decode::gpu_test::merge {

using testing::DeviceBuffer;

class MergeGpu : public gpu_test::GpuTest {};

inline void cuda(cudaError_t status, const char* what) { testing::check_cuda(static_cast<int>(status), what); }

// A case's inputs on the device and its outputs (contiguous out [T, H, D]
// of out_dtype and out_lse [T, H]), poisoned by run().
struct DeviceMerge {
  explicit DeviceMerge(test::MergeCase& m)
      : partials(gpu_test::upload(m.partials)),
        lses(gpu_test::upload(m.lses)),
        out(std::max<size_t>(m.out_elements() * (m.config.out_dtype == MergeDType::kFloat32 ? 4 : 2), 1)),
        out_lse(std::max<size_t>(m.config.tokens * m.config.heads * sizeof(float), 1)) {
    args = m.args(partials.get(), lses.as<float>(), out.get(), out_lse.as<float>(), MemorySpace::kDevice);
  }
  // Poisons the outputs, merges on `stream`, waits, downloads.
  void run(cudaStream_t stream = nullptr) {
    out.fill_bytes(kPoisonByte);
    out_lse.fill_bytes(kPoisonByte);
    const Status status = merge_states(args, stream);
    ASSERT_TRUE(status.ok()) << status.message();
    cuda(cudaDeviceSynchronize(), "merge");
    got_out = out.download<uint8_t>();
    got_lse = out_lse.download<float>();
  }

  DeviceBuffer partials, lses, out, out_lse;
  MergeStatesArgs args;
  std::vector<uint8_t> got_out;
  std::vector<float> got_lse;
};

inline void check_merge(test::MergeCase& m, const DeviceMerge& d) {
  const reference::MergeResult ref = reference::merge_states(m.host_args(nullptr, nullptr));
  const std::vector<double> values = test::decode_output(d.got_out, m.config.out_dtype);
  const test::MergeComparison c = test::compare(values, ref.out);
  EXPECT_LE(c.relative_error, m.config.out_dtype == MergeDType::kFloat32 ? 1e-5 : kMaxRelativeError);
  EXPECT_EQ(c.non_finite, 0);
  EXPECT_EQ(test::nonzero_in_empty_rows(m, d.got_out, d.got_lse), 0);
  int64_t bad_lse = 0;
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    const double want = ref.lse[i], got = d.got_lse[i];
    bad_lse += std::isinf(want) ? got != want : !(std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want)));
  }
  EXPECT_EQ(bad_lse, 0) << "out_lse entries off the reference";
}

}  // namespace sparse_decode::gpu_test::merge
