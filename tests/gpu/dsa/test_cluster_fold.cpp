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

class DsaGpuClusterFold : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuClusterFold, KeepsTheDirectKernelsBits) {
  const Case& c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided);
  const int32_t rows = static_cast<int32_t>(p.rows());
  int runs = 0;
  // Launched: min(splits, R), at least 2 (R is 8, 16 or 33 in the cases).
  for (int32_t splits : {1, 2, 3, 4, 5, 8, 12, 16, std::min(dsa_splits_for(rows), kDsaMaxClusterSplits)}) {
    for (bool clear : {d.args.clear_inactive, !d.args.clear_inactive}) {
      DsaDecodeArgs direct = d.args;
      direct.kernel = DsaKernel::kDirect;
      direct.splits = splits;
      direct.clear_inactive = clear;
      const std::vector<uint16_t> want = run(d, direct);
      for (bool pdl : {false, true}) {
        DsaDecodeArgs cluster = direct;
        cluster.kernel = DsaKernel::kDirectCluster;
        cluster.enable_pdl = pdl;
        const std::vector<uint16_t> got = run(d, cluster);
        const std::string name = "cluster fold, clear_inactive " + std::to_string(clear) + ", " +
                                 run_name(splits, pdl);
        check_output(got, cluster, p, ref, name);
        EXPECT_TRUE(got == want) << name << ": the bits differ from kDirect's";
        ++runs;
      }
    }
  }
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
  for (int32_t splits : {4, 8, 12, 16, std::min(dsa_splits_for(rows), kDsaMaxClusterSplits)}) {
    for (bool clear : {d.args.clear_inactive, !d.args.clear_inactive}) {
      DsaDecodeArgs staged = d.args;
      staged.kernel = DsaKernel::kStaged;  // the combine kernel at every split count
      staged.splits = splits;
      staged.clear_inactive = clear;
      const std::vector<uint16_t> want = run(d, staged);
      for (bool pdl : {false, true}) {
        DsaDecodeArgs automatic = staged;
        automatic.kernel = DsaKernel::kAuto;  // the fold from 8 launched splits
        automatic.enable_pdl = pdl;
        const std::vector<uint16_t> got = run(d, automatic);
        const std::string name = "BF16 fold, clear_inactive " + std::to_string(clear) + ", " + run_name(splits, pdl);
        check_output(got, automatic, p, ref, name);
        EXPECT_TRUE(got == want) << name << ": the bits differ from kStaged's";
      }
    }
  }
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
