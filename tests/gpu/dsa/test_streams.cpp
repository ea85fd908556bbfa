// dsa_decode among other work on a stream: captured in a CUDA graph (replays
// follow new inputs), with PDL after a kernel that writes its inputs late,
// and two calls in a row sharing one workspace.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/dsa/checks.h"
#include "support/delayed_copy.h"
#include "support/test_support.h"

namespace sparse_decode::gpu_test::dsa {
namespace {

// Changes regions and positions so that every row sees a subset of what it
// saw (positions lowered, columns dropped, repeated or shuffled): no NaN
// slot becomes visible. Row 0 keeps its keys (shuffled columns only).
void shrink_visibility(DsaProblem& p, std::mt19937_64& rng) {
  const int32_t R = p.config.regions;
  for (int64_t r = 0; r < p.rows(); ++r) {
    if (!p.active[r]) continue;
    int32_t* regions = &p.regions[r * p.regions_stride];
    if (r > 0) {
      p.positions[r] -= static_cast<int32_t>(rng() % (2 * p.config.block_size + 1));
      for (int32_t c = 0; c < R; ++c) {
        const uint64_t u = rng() % 10;
        if (u < 2) {
          regions[c] = -1;
        } else if (u < 4) {
          regions[c] = regions[rng() % R];
        }
      }
    }
    std::shuffle(regions, regions + R, rng);
  }
}

// A CUDA graph captures one call (splits 4, without and with PDL): replays
// give the direct call's bits; after new regions, positions (and FP8 scales)
// are written to the same buffers, a replay follows them (the reference of
// the new inputs, and a direct call on them).
TEST_F(DsaGpu, CapturedInACudaGraph) {
  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "with PDL" : "without PDL");
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    std::mt19937_64 rng(seed);
    Case c = kCases[1];
    c.requests = 4;
    const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
    DeviceProblem d(p, false);
    DsaDecodeArgs args = d.args;
    args.splits = 4;
    args.enable_pdl = pdl;
    const std::vector<uint16_t> direct = run(d, args);
    check_output(direct, args, p, reference::dsa_decode(p.host_args(nullptr)), "direct call");

    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    const size_t bytes = workspace_size(args);
    DeviceBuffer workspace = make_workspace(bytes);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
    const Status status = dsa_decode(args, workspace.get(), bytes, stream);
    cuda(cudaStreamEndCapture(stream, &graph), "end capture");
    ASSERT_TRUE(status.ok()) << status.message();
    cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    for (int replay = 0; replay < 3; ++replay) {
      d.out.fill_bytes(kPoisonByte);
      workspace.fill_bytes(kWorkspacePoison);
      cuda(cudaGraphLaunch(exec, stream), "replay");
      cuda(cudaStreamSynchronize(stream), "replay");
      EXPECT_TRUE(d.out.download<uint16_t>() == direct) << "replay " << replay << " differs from the direct call";
    }

    DsaProblem changed = p;
    shrink_visibility(changed, rng);
    changed.k_scale *= 1.5f;
    changed.v_scale *= 0.75f;
    d.reupload_regions_positions_scales(changed);
    d.out.fill_bytes(kPoisonByte);
    cuda(cudaGraphLaunch(exec, stream), "replay");
    cuda(cudaStreamSynchronize(stream), "replay");
    const std::vector<uint16_t> replayed = d.out.download<uint16_t>();
    check_output(replayed, args, changed, reference::dsa_decode(changed.host_args(nullptr)),
                 "replay after new regions, positions and scales");
    EXPECT_FALSE(replayed == direct) << "the replay did not follow the new inputs";
    EXPECT_TRUE(run(d, args) == replayed) << "the replay differs from a direct call on the new inputs";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// PDL: the call may start while the previous kernel still writes one of its
// inputs (the delayed copy releases its dependents at once, then writes ~200
// us later): each input in turn arrives late, holding stale bytes until then,
// and the result must be the one of the final inputs. One and three splits.
TEST_F(DsaGpu, PdlWaitsForTheKernelThatWritesTheInputs) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[1], seed));
  for (int32_t splits : {1, 3}) {
    DeviceProblem d(p, false);
    DsaDecodeArgs args = d.args;
    args.splits = splits;
    args.enable_pdl = true;
    const std::vector<uint16_t> want = run(d, args);
    check_output(want, args, p, reference::dsa_decode(p.host_args(nullptr)), run_name(splits, true));
    struct Late {
      const char* name;
      DeviceBuffer* buffer;
      uint8_t stale;  // 0xFF: -1 ids/positions; 0x00: zero q, inactive rows, gate 0.5
    };
    const Late lates[] = {{"q", &d.q, 0x00},
                          {"regions", &d.regions, 0xFF},
                          {"positions", &d.positions, 0xFF},
                          {"block_table", &d.block_table, 0xFF},
                          {"active", &d.active, 0x00},
                          {"gate", &d.gate, 0x00}};
    cudaStream_t stream = nullptr;
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    const size_t bytes = workspace_size(args);
    DeviceBuffer workspace = make_workspace(bytes);
    for (const Late& late : lates) {
      SCOPED_TRACE(std::string(late.name) + " written late, splits " + std::to_string(splits));
      DeviceBuffer fresh(late.buffer->bytes());
      cuda(cudaMemcpy(fresh.get(), late.buffer->get(), fresh.bytes(), cudaMemcpyDeviceToDevice), "keep");
      late.buffer->fill_bytes(late.stale);
      d.out.fill_bytes(kPoisonByte);
      testing::launch_delayed_copy(late.buffer->get(), fresh.get(), fresh.bytes(), 200000, stream);
      const Status status = dsa_decode(args, workspace.get(), bytes, stream);
      ASSERT_TRUE(status.ok()) << status.message();
      cuda(cudaStreamSynchronize(stream), "stream");
      EXPECT_TRUE(d.out.download<uint16_t>() == want)
          << "the PDL launch read " << late.name << " before the previous kernel wrote it";
    }
    cudaStreamDestroy(stream);
  }
}

// Two calls in a row on one workspace, both with PDL, twice: each gets its own
// result (the second call's split kernel must not overwrite the partials
// while the first call's combine still reads them).
TEST_F(DsaGpu, PdlCallsInARowShareOneWorkspace) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Case many_rows = kCases[12];  // 128 rows of 16 heads at 8 splits: a combine that takes a while
  many_rows.requests = 16;
  const DsaProblem p1 = testing::make_dsa_problem(config_of(many_rows, seed));
  const DsaProblem p2 = testing::make_dsa_problem(config_of(kCases[1], seed + 1));
  DeviceProblem d1(p1, false), d2(p2, false);
  DsaDecodeArgs a1 = d1.args, a2 = d2.args;
  a1.splits = 8, a2.splits = 32;
  a1.enable_pdl = a2.enable_pdl = true;
  a1.kernel = a2.kernel = DsaKernel::kDirect;  // the combine kernel reads the workspace (kAuto folds in a cluster)
  const std::vector<uint16_t> want1 = run(d1, a1), want2 = run(d2, a2);
  const size_t bytes = std::max(workspace_size(a1), workspace_size(a2));
  DeviceBuffer workspace = make_workspace(bytes);
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  d1.out.fill_bytes(kPoisonByte);
  d2.out.fill_bytes(kPoisonByte);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(dsa_decode(a1, workspace.get(), bytes, stream).ok());
    ASSERT_TRUE(dsa_decode(a2, workspace.get(), bytes, stream).ok());
  }
  cuda(cudaStreamSynchronize(stream), "stream");
  EXPECT_TRUE(d1.out.download<uint16_t>() == want1) << "the first of two calls on one workspace";
  EXPECT_TRUE(d2.out.download<uint16_t>() == want2) << "the second of two calls on one workspace";
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace sparse_decode::gpu_test::dsa
