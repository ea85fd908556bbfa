// Determinism of dsa_decode: the same bits run after run, whatever the
// workspace held before, and a row's bits independent of the batch around
// it for a given `splits`.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

// Same inputs, same splits: the same bits over 20 runs (the workspace
// refilled with a different byte before each), for several splits.
TEST_F(DsaGpu, BitwiseIdenticalOverRepeatedRuns) {
  for (const Case& c : {kCases[1], kCases[6]}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    SCOPED_TRACE(c.label);
    const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
    DeviceProblem d(p, c.strided);
    for (int32_t splits : {1, 3, 4, 32}) {
      DsaDecodeArgs args = d.args;
      args.splits = splits;
      const size_t bytes = workspace_size(args);
      DeviceBuffer workspace = make_workspace(bytes);
      std::vector<uint16_t> first;
      for (int run = 0; run < 20; ++run) {
        workspace.fill_bytes(static_cast<uint8_t>(run * 37));
        d.out.fill_bytes(kPoisonByte);
        const Status status = dsa_decode(args, workspace.get(), bytes, nullptr);
        ASSERT_TRUE(status.ok()) << status.message();
        cuda(cudaDeviceSynchronize(), "dsa_decode");
        std::vector<uint16_t> got = d.out.download<uint16_t>();
        if (run == 0) {
          first = std::move(got);
        } else {
          ASSERT_TRUE(got == first) << "splits " << splits << ": run " << run << " differs from run 0";
        }
      }
    }
  }
}

// A row's bits at a given `splits` do not depend on the batch around it:
// the first rows of a batch of more than two CTAs an SM, run alone, at
// every `splits` kAuto serves without the cluster fold, FP8 (the direct
// kernel) and BF16 (the split kernel), blocks of one region a tile and of
// several.
TEST_F(DsaGpu, RowBitsIndependentOfTheBatch) {
  int sms = 0;
  cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  const std::pair<DType, int32_t> forms[] = {{kFp8, 64}, {kFp8, 16}, {kBf16, 64}, {kBf16, 16}};
  for (const auto& [dtype, block] : forms) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    SCOPED_TRACE(std::string(dtype == kFp8 ? "FP8" : "BF16") + ", block " + std::to_string(block));
    DsaProblemConfig config;
    config.query_len = 4;
    config.groups = 1;
    config.requests = 2 * sms / config.query_len + 8;  // more rows than two CTAs an SM at one split
    config.block_size = block;
    config.regions = 8;
    config.max_blocks = 8;
    config.cache_dtype = dtype;
    config.seed = seed;
    const DsaProblem p = testing::make_dsa_problem(config);
    DeviceProblem d(p, false);
    const int64_t few = 12;  // rows of the small batch: its first three requests
    ASSERT_GT(p.rows(), 2 * int64_t{sms});
    for (int32_t splits : {1, 2, 4}) {
      DsaDecodeArgs all = d.args;
      all.splits = splits;
      DsaDecodeArgs first = all;
      first.num_rows = few;
      const std::vector<uint16_t> whole = run(d, all);
      const std::vector<uint16_t> alone = run(d, first);
      const size_t elements = static_cast<size_t>(few * all.out_row_stride);
      ASSERT_TRUE(std::equal(alone.begin(), alone.begin() + elements, whole.begin()))
          << "splits " << splits << ": the first " << few << " rows' bits differ between the batches";
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
