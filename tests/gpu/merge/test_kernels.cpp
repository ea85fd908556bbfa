// The merge kernel against the fp64 reference (gpu/merge/checks.h): every
// dtype pair, head dims and rank counts around the kernel's rank batch,
// many tokens and heads, FlashInfer's [T, R, H, D] layout, lse far from 0;
// and its promises: one non-empty rank gives its partial back bit for bit,
// the same bits run after run, on any stream, with PDL and replayed from a
// CUDA graph, and a permutation of the ranks changes the output only by
// rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/merge/checks.h"

namespace sparse_decode::gpu_test::merge {
namespace {

using test::MergeCase;
using test::MergeCaseConfig;

void check_case(MergeCaseConfig c) {
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed) + ", R " + std::to_string(c.ranks) + ", T " + std::to_string(c.tokens) +
               ", H " + std::to_string(c.heads) + ", D " + std::to_string(c.head_dim));
  MergeCase m = test::make_merge_case(c);
  DeviceMerge d(m);
  d.run();
  check_merge(m, d);
}

TEST_F(MergeGpu, EveryDtypePairAndBothRankForms) {
  for (MergeDType in : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
    for (MergeDType out : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
      for (bool stacked : {false, true}) {
        MergeCaseConfig c;
        c.tokens = 37;
        c.partial_dtype = in;
        c.out_dtype = out;
        c.stacked = stacked;
        check_case(c);
      }
    }
  }
}

TEST_F(MergeGpu, HeadDimsAndRankCounts) {
  for (int dim : {8, 64, 128, 192, 512, 1024}) {
    for (int ranks : {1, 2, 7, 8, 9, 17, kMergeMaxRanks}) {
      MergeCaseConfig c;
      c.head_dim = dim;
      c.ranks = ranks;
      c.tokens = 5;
      c.heads = 3;  // granules that do not fill a CTA
      check_case(c);
    }
  }
}

TEST_F(MergeGpu, ManyTokensAndHeads) {
  for (auto [tokens, heads] : {std::pair{2048, 16}, {300, 128}, {1, 128}}) {
    MergeCaseConfig c;
    c.ranks = 2;
    c.tokens = tokens;
    c.heads = heads;
    c.head_pad = 0;
    check_case(c);
  }
}

TEST_F(MergeGpu, LargeAndTinyLse) {
  for (double center : {1e4, -1e4, 88.0, -104.0}) {
    MergeCaseConfig c;
    c.lse_center = center;
    c.partial_dtype = c.out_dtype = MergeDType::kFloat32;
    check_case(c);
  }
}

TEST_F(MergeGpu, OneNonEmptyRankGivesItsPartialBack) {
  for (MergeDType dtype : {MergeDType::kBFloat16, MergeDType::kFloat32}) {
    MergeCaseConfig c;
    c.ranks = 5;
    c.tokens = 9;
    c.partial_dtype = c.out_dtype = dtype;
    c.empty_fraction = 0.0;
    c.empty_token = false;
    c.seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(c.seed));
    MergeCase m = test::make_merge_case(c);
    // Token t keeps rank t % R only.
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int r = 0; r < c.ranks; ++r) {
        if (r == t % c.ranks) continue;
        for (int h = 0; h < c.heads; ++h) m.lses[m.lse_index(r, t, h)] = -INFINITY;
      }
    }
    m.set_partial(0, 0, 0, 0, -0.0);
    DeviceMerge d(m);
    d.run();
    const int64_t bytes = m.element_bytes();
    for (int64_t t = 0; t < c.tokens; ++t) {
      const int r = static_cast<int>(t % c.ranks);
      for (int h = 0; h < c.heads; ++h) {
        const uint8_t* want = &m.partials[(r * m.rank_stride + t * m.token_stride + h * m.head_stride) * bytes];
        const uint8_t* have = &d.got_out[(t * c.heads + h) * c.head_dim * bytes];
        ASSERT_EQ(std::memcmp(want, have, c.head_dim * bytes), 0) << "token " << t << ", head " << h;
        ASSERT_EQ(d.got_lse[t * c.heads + h], m.lses[m.lse_index(r, t, h)]) << "token " << t << ", head " << h;
      }
    }
  }
}

TEST_F(MergeGpu, SameBitsOnAnyStreamWithPdlAndFromAGraph) {
  MergeCaseConfig c;
  c.ranks = 3;
  c.tokens = 64;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase m = test::make_merge_case(c);
  DeviceMerge d(m);
  d.run();
  check_merge(m, d);
  const std::vector<uint8_t> first = d.got_out;
  const std::vector<float> first_lse = d.got_lse;
  auto same = [&](const char* what) {
    EXPECT_EQ(d.got_out, first) << what;
    EXPECT_EQ(std::memcmp(d.got_lse.data(), first_lse.data(), first_lse.size() * 4), 0) << what;
  };
  d.run();
  same("second run");
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  d.args.enable_pdl = true;
  d.run(stream);
  same("PDL on a stream");

  d.out.fill_bytes(kPoisonByte);
  d.out_lse.fill_bytes(kPoisonByte);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  const Status status = merge_states(d.args, stream);
  cuda(cudaStreamEndCapture(stream, &graph), "end capture");
  ASSERT_TRUE(status.ok()) << status.message();
  cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int replay = 0; replay < 3; ++replay) cuda(cudaGraphLaunch(exec, stream), "replay");
  cuda(cudaStreamSynchronize(stream), "replay");
  d.got_out = d.out.download<uint8_t>();
  d.got_lse = d.out_lse.download<float>();
  same("graph replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(MergeGpu, PermutedRanksDifferOnlyByRounding) {
  MergeCaseConfig c;
  c.ranks = 6;
  c.tokens = 16;
  c.out_dtype = MergeDType::kFloat32;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase m = test::make_merge_case(c);
  DeviceMerge d(m);
  d.run();
  const std::vector<double> first = test::decode_output(d.got_out, c.out_dtype);
  std::vector<int> order(c.ranks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(c.seed));
  std::vector<const void*> partials(c.ranks);
  std::vector<const float*> lses(c.ranks);
  for (int r = 0; r < c.ranks; ++r) partials[r] = d.args.partials[order[r]], lses[r] = d.args.lses[order[r]];
  d.args.partials = partials.data();
  d.args.lses = lses.data();
  d.run();
  const std::vector<double> second = test::decode_output(d.got_out, c.out_dtype);
  const test::MergeComparison diff = test::compare(second, first);
  EXPECT_LE(diff.relative_error, 1e-6) << "beyond float32 rounding";
  check_merge(m, d);
}

TEST_F(MergeGpu, FlashInferLayoutAndHeadMajorLse) {
  // v [T, R, H, D] and s [T, R, H] as FlashInfer's merge_states takes them,
  // out_lse [H, T] as vLLM's merge_attn_states writes it.
  MergeCaseConfig c;
  c.ranks = 3;
  c.tokens = 7;
  c.heads = 8;
  c.head_pad = 0;
  c.seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(c.seed));
  MergeCase m = test::make_merge_case(c);
  DeviceMerge listed(m);
  listed.run();
  const int64_t R = c.ranks, T = c.tokens, H = c.heads, D = c.head_dim;
  std::vector<uint8_t> v(static_cast<size_t>(T * R * H * D * 2));
  std::vector<float> s(static_cast<size_t>(T * R * H));
  for (int r = 0; r < R; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        s[(t * R + r) * H + h] = m.lses[m.lse_index(r, t, h)];
        const int64_t from = r * m.rank_stride + t * m.token_stride + h * D;
        std::memcpy(&v[((t * R + r) * H + h) * D * 2], &m.partials[from * 2], D * 2);
      }
    }
  }
  DeviceBuffer dv(v), ds(s), out(T * H * D * 2), out_lse(T * H * 4);
  out.fill_bytes(kPoisonByte);
  out_lse.fill_bytes(kPoisonByte);
  MergeStatesArgs a;
  a.num_ranks = c.ranks;
  a.num_tokens = T;
  a.num_heads = c.heads;
  a.partial_base = dv.get();
  a.partial_rank_stride = H * D;
  a.partial_token_stride = R * H * D;
  a.lse_base = ds.as<float>();
  a.lse_rank_stride = H;
  a.lse_token_stride = R * H;
  a.out = out.get();
  a.out_token_stride = H * D;
  a.out_lse = out_lse.as<float>();
  a.out_lse_token_stride = 1;
  a.out_lse_head_stride = T;
  const Status status = merge_states(a, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  cuda(cudaDeviceSynchronize(), "merge");
  EXPECT_EQ(out.download<uint8_t>(), listed.got_out);
  const std::vector<float> lse = out_lse.download<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      EXPECT_EQ(std::memcmp(&lse[h * T + t], &listed.got_lse[t * H + h], 4), 0) << "token " << t << ", head " << h;
    }
  }
}

}  // namespace
}  // namespace sparse_decode::gpu_test::merge
