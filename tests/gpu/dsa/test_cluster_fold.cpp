// The cluster fold: a row's splits run as one cluster that folds their
// results through distributed shared memory. kDirectCluster over the FP8
// cases of checks.h and every launched split count it serves (2..16): the
// fp64 reference's bound, kDirect's bits (the same partials folded with the
// combine kernel's arithmetic) with and without PDL and with clear_inactive
// both ways, 12 launched splits past the portable cluster size; one split
// runs the direct kernel alone. The split kernel's fold (BF16 caches, kAuto
// from 8 launched splits) over the BF16 cases: kStaged's bits, one launch.
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

// For each split count and clear_inactive both ways: `baseline`'s output,
// then `fold`'s without and with PDL, each within the reference's bound and
// bitwise `baseline`'s (named `baseline_name` in failures). Returns the runs
// compared.
int expect_fold_keeps_bits(DeviceProblem& d, const DsaProblem& p, const reference::DsaResult& ref,
                           const std::vector<int32_t>& split_counts, DsaKernel baseline,
                           const char* baseline_name, DsaKernel fold, const std::string& label) {
  int runs = 0;
  for (int32_t splits : split_counts) {
    for (bool clear : {d.args.clear_inactive, !d.args.clear_inactive}) {
      DsaDecodeArgs base = d.args;
      base.kernel = baseline;
      base.splits = splits;
      base.clear_inactive = clear;
      const std::vector<uint16_t> want = run(d, base);
      for (bool pdl : {false, true}) {
        DsaDecodeArgs folded = base;
        folded.kernel = fold;
        folded.enable_pdl = pdl;
        const std::vector<uint16_t> got = run(d, folded);
        const std::string name = label + ", clear_inactive " + std::to_string(clear) + ", " + run_name(splits, pdl);
        check_output(got, folded, p, ref, name);
        EXPECT_TRUE(got == want) << name << ": the bits differ from " << baseline_name << "'s";
        ++runs;
      }
    }
  }
  return runs;
}

class DsaGpuClusterFold : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuClusterFold, KeepsTheDirectKernelsBits) {
  const Case& c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided);
  const int32_t rows = static_cast<int32_t>(p.rows());
  // Launched: min(splits, R), at least 2 (R is 8, 16 or 33 in the cases).
  const int runs = expect_fold_keeps_bits(
      d, p, ref, {1, 2, 3, 4, 5, 8, 12, 16, std::min(dsa_splits_for(rows), kDsaMaxClusterSplits)},
      DsaKernel::kDirect, "kDirect", DsaKernel::kDirectCluster, "cluster fold");
  EXPECT_GT(runs, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuClusterFold, ::testing::ValuesIn(fp8_cases()),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

class DsaGpuBf16ClusterFold : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuBf16ClusterFold, KeepsTheSplitKernelsBits) {
  const Case& c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided, c.bf16_scales);
  const int32_t rows = static_cast<int32_t>(p.rows());
  // kStaged: the combine kernel at every split count; kAuto: the fold from 8 launched splits.
  expect_fold_keeps_bits(d, p, ref, {4, 8, 12, 16, std::min(dsa_splits_for(rows), kDsaMaxClusterSplits)},
                         DsaKernel::kStaged, "kStaged", DsaKernel::kAuto, "BF16 fold");
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuBf16ClusterFold, ::testing::ValuesIn(bf16_cases()),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

// kAuto with a BF16 cache launches one kernel from 8 launched splits (the
// fold), two below (the split kernel and the combine).
TEST_F(DsaGpu, Bf16FoldsItsSplitsInOneLaunch) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[0], seed));  // BF16, R = 8
  DeviceProblem d(p, false);
  for (const auto& [splits, launches] : {std::pair<int32_t, size_t>{4, 2}, {8, 1}}) {
    DsaDecodeArgs args = d.args;
    args.splits = splits;
    const size_t bytes = workspace_size(args);
    DeviceBuffer workspace = make_workspace(bytes);
    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cudaGraph_t graph = nullptr;
    cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
    const Status status = dsa_decode(args, workspace.get(), bytes, stream);
    cuda(cudaStreamEndCapture(stream, &graph), "end capture");
    EXPECT_TRUE(status.ok()) << status.message();
    size_t nodes = 0;
    cuda(cudaGraphGetNodes(graph, nullptr, &nodes), "graph nodes");
    EXPECT_EQ(nodes, launches) << "splits " << splits;
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
