// GPU tests of dsv4_decode_hca (SPEC section 3) on device memory: the GPU
// path expands the HCA metadata into a section-1 table in the workspace and
// runs section 1's kernels on it (docs/hca_layout.md, "The GPU path"). Each
// problem runs twice on the device: dsv4_decode_hca on the HCA arguments,
// and dsv4_decode on testing::expand_to_section1 of the same problem (the
// host-side expansion, written independently). The two must agree bit for
// bit (out, lse, the counter), and both match the fp64 reference (relative
// L2 <= 3e-3). FP8 only: section 3 has no BF16. Outputs are poisoned before
// every run, and so is the workspace (an index the expand kernel forgot to
// write would be counted past the pool or read a NaN row). Every case draws
// fresh random inputs from a seed printed on failure
// (SPARSE_DECODE_TEST_SEED=<seed> replays it). Without a CUDA device every
// test reports SKIPPED.
//
// Run first: --gtest_filter='Dsv4HcaGpu.ExpandedTable*' (the expand kernel
// alone, compared with expand_to_section1 entry for entry).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/dsv4_hca_checks.h"
#include "support/test_support.h"
#include "support/delayed_copy.h"
#include "support/gpu_test_support.h"
#include "reference/dsv4_hca_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_hca_problem.h"

namespace sparse_decode {
namespace {

using testing::DeviceBuffer;
using testing::Dsv4HcaExpansion;
using testing::Dsv4HcaProblem;
using testing::Dsv4HcaProblemConfig;

using gpu_test::kMaxRelativeError;
using gpu_test::kPoisonByte;
constexpr uint8_t kWorkspacePoison = 0x55;  // index 0x55555555: past every pool here
using gpu_test::DeviceResult;
using gpu_test::kCountStart;

class Dsv4HcaGpu : public gpu_test::GpuTest {};


// An HCA problem on the device: its inputs, out [T, H, 512] BF16, lse [T, H]
// and the counter; `hca` runs dsv4_decode_hca, `section1` dsv4_decode on the
// host-side expansion (same q, pools, sinks and outputs).
struct DeviceProblem {
  explicit DeviceProblem(const Dsv4HcaProblem& p)
      : expansion(testing::expand_to_section1(p)),
        q(gpu_test::upload(p.q)),
        swa_kv(gpu_test::upload(p.swa_kv)),
        compressed_kv(gpu_test::upload(p.compressed_kv)),
        swa_rows(gpu_test::upload(p.swa_rows)),
        swa_lens(gpu_test::upload(p.swa_lens)),
        block_table(gpu_test::upload(p.block_table)),
        lens(gpu_test::upload(p.lens)),
        hca_seq_lens(gpu_test::upload(p.hca_seq_lens)),
        cum_seq_lens_q(gpu_test::upload(p.cum_seq_lens_q)),
        sinks(gpu_test::upload(p.sinks)),
        expanded_indices(gpu_test::upload(expansion.indices)),
        expanded_lens(gpu_test::upload(expansion.lens)),
        out(static_cast<size_t>(p.config.tokens) * p.config.heads * kHeadDim * 2),
        lse(static_cast<size_t>(p.config.tokens) * p.config.heads * 4),
        count(sizeof(int32_t)) {
    hca = p.host_args(out.get(), lse.as<float>());
    hca.memory = MemorySpace::kDevice;
    hca.q = q.get();
    hca.swa_kv.data = swa_kv.get();
    hca.compressed_kv.data = compressed_kv.get();
    hca.swa_rows = swa_rows.as<int32_t>();
    hca.swa_lens = swa_lens.as<int32_t>();
    hca.block_table = block_table.as<int32_t>();
    hca.lens = lens.as<int32_t>();
    hca.hca_seq_lens = hca_seq_lens.as<int32_t>();
    hca.cum_seq_lens_q = p.cum_seq_lens_q.empty() ? nullptr : cum_seq_lens_q.as<int32_t>();
    hca.sinks = p.sinks.empty() ? nullptr : sinks.as<float>();
    hca.out_of_range_count = count.as<int32_t>();

    section1 = expansion.args(p, out.get(), lse.as<float>());
    section1.memory = MemorySpace::kDevice;
    section1.q = hca.q;
    section1.swa_kv = hca.swa_kv;
    section1.compressed_kv = hca.compressed_kv;
    section1.indices = expanded_indices.as<int32_t>();
    section1.lens = expanded_lens.as<int32_t>();
    section1.sinks = hca.sinks;
    section1.out_of_range_count = hca.out_of_range_count;
  }

  Dsv4HcaExpansion expansion;
  DeviceBuffer q, swa_kv, compressed_kv, swa_rows, swa_lens, block_table, lens, hca_seq_lens, cum_seq_lens_q, sinks,
      expanded_indices, expanded_lens, out, lse, count;
  Dsv4HcaDecodeArgs hca;
  Dsv4DecodeArgs section1;
};

void prepare_outputs(DeviceProblem& d) { gpu_test::poison_outputs(d.out, d.lse, d.count); }

DeviceResult download(const DeviceProblem& d) { return gpu_test::download_outputs(d.out, d.lse, d.count); }

// A workspace of `bytes` (cudaMalloc: 16-byte aligned), poisoned.
DeviceBuffer poisoned_workspace(size_t bytes) {
  DeviceBuffer workspace(std::max<size_t>(bytes, 16));
  workspace.fill_bytes(kWorkspacePoison);
  return workspace;
}

// dsv4_decode_hca with a poisoned workspace of workspace_size(args) bytes;
// the workspace is kept in `*kept` when given (the expanded-table test reads it).
DeviceResult run_hca(DeviceProblem& d, cudaStream_t stream = nullptr, DeviceBuffer* kept = nullptr) {
  prepare_outputs(d);
  const size_t bytes = workspace_size(d.hca);
  EXPECT_TRUE(d.hca.num_tokens == 0 || bytes > 0);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  const Status status = dsv4_decode_hca(d.hca, workspace.get(), bytes, stream);
  EXPECT_TRUE(status.ok()) << status.message();
  DeviceResult r = download(d);
  if (kept) *kept = std::move(workspace);
  return r;
}

DeviceResult run_section1(DeviceProblem& d) {
  prepare_outputs(d);
  const size_t bytes = workspace_size(d.section1);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  const Status status = dsv4_decode(d.section1, workspace.get(), bytes, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  return download(d);
}

void expect_same_bits(const DeviceResult& got, const DeviceResult& want, const char* what) {
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
void expect_matches_reference(const DeviceResult& got, const reference::Dsv4Result& ref, int64_t T, int H,
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
DeviceResult check_problem(const Dsv4HcaProblem& p) {
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
Dsv4HcaProblemConfig small_config(uint64_t seed, int64_t page_size) {
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

constexpr int64_t kPageSizes[] = {1, 2, 61, 64, 256};

// small_config with T tokens of uniform q_len.
Dsv4HcaProblem batch_problem(uint64_t seed, int64_t page_size, int64_t tokens, int32_t q_len) {
  Dsv4HcaProblemConfig c = small_config(seed, page_size);
  c.tokens = tokens;
  c.q_len = q_len;
  return testing::make_dsv4_hca_problem(c);
}

// ---------------------------------------------------------------------------
// The expand kernel alone: the table and lens it writes in the workspace are
// expand_to_section1's, entry for entry. The layout: section 1's split scratch
// (workspace_size of the expansion, rounded up to 16), the table [T, W'],
// then lens [T].

TEST_F(Dsv4HcaGpu, ExpandedTableIsExpandToSection1) {
  for (int64_t page_size : kPageSizes) {
    for (bool varlen : {false, true}) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::seed_message(seed));
      SCOPED_TRACE(::testing::Message() << "page_size " << page_size << (varlen ? " varlen" : " uniform"));
      Dsv4HcaProblemConfig c = small_config(seed, page_size);
      c.varlen = varlen;
      c.q_len = varlen ? 4 : 3;
      c.tokens = 9;
      c.hole_fraction = 0.1;
      const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
      DeviceProblem d(p);
      DeviceBuffer workspace;
      run_hca(d, nullptr, &workspace);
      const size_t scratch = (workspace_size(d.section1) + 15) / 16 * 16;
      const int32_t W = d.expansion.width;
      const size_t table_bytes = static_cast<size_t>(c.tokens) * W * 4;
      ASSERT_GE(workspace.bytes(), scratch + table_bytes + c.tokens * 4);
      std::vector<uint8_t> bytes = workspace.download<uint8_t>();
      std::vector<int32_t> table(static_cast<size_t>(c.tokens) * W), lens(c.tokens);
      std::memcpy(table.data(), bytes.data() + scratch, table_bytes);
      std::memcpy(lens.data(), bytes.data() + scratch + table_bytes, lens.size() * 4);
      for (int64_t t = 0; t < c.tokens; ++t) {
        EXPECT_EQ(lens[t], d.expansion.lens[t]) << "lens of token " << t;
        for (int32_t col = 0; col < W; ++col) {
          ASSERT_EQ(table[t * W + col], d.expansion.indices[t * W + col]) << "token " << t << " column " << col;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Random problems over the page sizes, uniform and varlen, at several head
// counts and batch sizes (so that kAuto picks the cluster, split and stream
// kernels, and 64-head tiles at H = 64, 128 where W' <= 1024).

struct RandomCase {
  int64_t page_size;
  int heads;
  int64_t tokens;
  int q_len;
  bool varlen;
  double holes;
  int32_t max_pages;  // 0: small_config's
};

void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << "page_size " << c.page_size << " heads " << c.heads << " tokens " << c.tokens << " q_len " << c.q_len
      << (c.varlen ? " varlen" : "") << " holes " << c.holes << " max_pages " << c.max_pages;
}

class Dsv4HcaGpuRandom : public Dsv4HcaGpu, public ::testing::WithParamInterface<RandomCase> {};

TEST_P(Dsv4HcaGpuRandom, EqualsSection1OnTheExpansion) {
  const RandomCase& rc = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, rc.page_size);
  c.heads = rc.heads;
  c.tokens = rc.tokens;
  c.q_len = rc.q_len;
  c.varlen = rc.varlen;
  c.hole_fraction = rc.holes;
  if (rc.max_pages > 0) {
    c.max_pages = rc.max_pages;
    c.compressed_pages = rc.max_pages + rc.max_pages / 2;
  }
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  check_problem(p);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Dsv4HcaGpuRandom,
    ::testing::Values(RandomCase{1, 16, 6, 3, false, 0.0, 0}, RandomCase{2, 8, 8, 2, true, 0.1, 0},
                      RandomCase{61, 16, 7, 4, true, 0.0, 0}, RandomCase{64, 32, 12, 4, false, 0.2, 0},
                      RandomCase{256, 16, 6, 6, true, 0.0, 0}, RandomCase{64, 128, 2, 1, false, 0.0, 0},
                      RandomCase{61, 64, 9, 3, false, 0.3, 0}, RandomCase{64, 64, 4, 2, true, 0.0, 12},
                      // Many tokens: the stream kernel (and the split path in between).
                      RandomCase{64, 16, 256, 4, false, 0.05, 0}, RandomCase{2, 16, 300, 5, true, 0.0, 0},
                      RandomCase{61, 128, 96, 2, false, 0.0, 0},
                      // Wide: W' = 128 + 16384, section 1's widest table.
                      RandomCase{64, 16, 4, 2, false, 0.0, 256}, RandomCase{256, 16, 20, 4, true, 0.0, 64}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// ---------------------------------------------------------------------------
// Edge cases on each page size.

class Dsv4HcaGpuEdge : public test::HcaEdgeFixture<Dsv4HcaGpu>, public ::testing::WithParamInterface<int64_t> {
 protected:
  void SetUp() override {
    Dsv4HcaGpu::SetUp();
    if (!IsSkipped()) start(small_config(seed_, GetParam()));
  }
};

// swa_lens 0, 128, below 0 and past 128 (clamped), and a random one below 128.
TEST_P(Dsv4HcaGpuEdge, WindowLengths) {
  SCOPED_TRACE(test::seed_message(seed_));
  for (int32_t window : {0, 128, -5, 1000, 37}) {
    SCOPED_TRACE(::testing::Message() << "swa_lens = " << window);
    Dsv4HcaProblem p = problem_;
    p.set_window(window, rng_());
    check_problem(p);
  }
}

// lens below 128 (negative too): no compressed slot; then swa_lens 0 too:
// nothing active, zeros and lse -inf (with sinks).
TEST_P(Dsv4HcaGpuEdge, LensBelow128AndEmptyTokens) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  for (int64_t t = 0; t < p.config.tokens; ++t) p.lens[t] = static_cast<int32_t>(rng_() % 129) - 1;
  check_problem(p);
  for (auto& w : p.swa_lens) w = 0;
  ASSERT_FALSE(p.sinks.empty());
  const DeviceResult r = check_problem(p);
  for (uint16_t bits : r.out) ASSERT_EQ(bits & 0x7FFF, 0) << "an empty token's output is not zero";
  for (float l : r.lse) ASSERT_TRUE(std::isinf(l) && l < 0) << "an empty token's lse is " << l;
}

// lens past the footprint and INT32_MAX: hca_seq_lens and the table's capacity bound the slots.
TEST_P(Dsv4HcaGpuEdge, LensPastTheFootprint) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  p.make_table_live(rng_());
  p.lens.assign(p.lens.size(), INT32_MAX);
  check_problem(p);
  p.hca_seq_lens.assign(p.hca_seq_lens.size(), INT32_MAX);
  check_problem(p);
}

// Negative pages and window rows are masked; pages and rows past their pool
// (INT32_MAX too: page * page_size overflows int32) are masked and counted.
TEST_P(Dsv4HcaGpuEdge, OutOfRangeAndNegativeIds) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  const int64_t expected = test::break_active_ids(p, rng_);
  EXPECT_GT(expected, 0);
  const DeviceResult r = check_problem(p);
  EXPECT_EQ(r.count, kCountStart + expected);
}

// Sinks +inf (zeros, lse unchanged), -inf (as no sink), none.
TEST_P(Dsv4HcaGpuEdge, Sinks) {
  SCOPED_TRACE(test::seed_message(seed_));
  Dsv4HcaProblem p = problem_;
  p.sinks.assign(p.config.heads, INFINITY);
  const DeviceResult plus = check_problem(p);
  p.sinks.assign(p.config.heads, -INFINITY);
  const DeviceResult minus = check_problem(p);
  p.sinks.clear();
  const DeviceResult none = check_problem(p);
  expect_same_bits(minus, none, "sink -inf vs no sink");
  for (uint16_t bits : plus.out) ASSERT_EQ(bits & 0x7FFF, 0);
  EXPECT_EQ(std::memcmp(plus.lse.data(), none.lse.data(), none.lse.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Dsv4HcaGpuEdge, ::testing::ValuesIn(kPageSizes),
                         [](const auto& info) { return "page_size_" + std::to_string(info.param); });

// ---------------------------------------------------------------------------

// Varlen offsets that stop short of T: the last tokens belong to no request
// and read no compressed slot (their window still counts).
TEST_F(Dsv4HcaGpu, TokensOutsideEveryRequest) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, 64);
  c.tokens = 12;
  c.q_len = 4;
  check_problem(test::with_unheld_tokens(c, 3));
}

// Many requests (varlen): the request search takes more than one round.
TEST_F(Dsv4HcaGpu, ManyVarlenRequests) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  Dsv4HcaProblemConfig c = small_config(seed, 2);
  c.varlen = true;
  c.q_len = 2;
  c.tokens = 600;  // about 400 requests: 128-ary search in two rounds
  c.heads = 8;
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  ASSERT_GT(p.num_requests, 128);
  check_problem(p);
}

// T = 0: Ok, workspace 0, nothing launched or written.
TEST_F(Dsv4HcaGpu, ZeroTokensWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 64));
  DeviceProblem d(p);
  prepare_outputs(d);
  Dsv4HcaDecodeArgs args = d.hca;
  args.num_tokens = 0;
  EXPECT_EQ(workspace_size(args), 0u);
  EXPECT_TRUE(supports(args).ok()) << supports(args).message();
  const Status status = dsv4_decode_hca(args, nullptr, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  const DeviceResult r = download(d);
  EXPECT_TRUE(std::all_of(r.out.begin(), r.out.end(), [](uint16_t b) { return b == 0xFFFF; }));
  EXPECT_EQ(r.count, kCountStart);
}

// Too small a workspace: InvalidArgument naming workspace_bytes, nothing written.
TEST_F(Dsv4HcaGpu, TooSmallWorkspaceWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = testing::make_dsv4_hca_problem(small_config(seed, 61));
  DeviceProblem d(p);
  prepare_outputs(d);
  const size_t bytes = workspace_size(d.hca);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  const Status status = dsv4_decode_hca(d.hca, workspace.get(), bytes - 1, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
  const DeviceResult r = download(d);
  EXPECT_TRUE(std::all_of(r.out.begin(), r.out.end(), [](uint16_t b) { return b == 0xFFFF; }));
  EXPECT_EQ(r.count, kCountStart);
  const std::vector<uint8_t> after = workspace.download<uint8_t>();
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == kWorkspacePoison; }));
}

// Deterministic and batch invariant: the same bits run after run, and a
// token's bits do not depend on the batch around it (the first tokens of a
// larger batch, where kAuto picks another kernel).
TEST_F(Dsv4HcaGpu, BitwiseIdenticalOverRunsAndBatches) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem big = batch_problem(seed, 64, 240, 4);
  const auto& c = big.config;
  DeviceProblem d(big);
  const DeviceResult first = run_hca(d);
  const DeviceResult second = run_hca(d);
  expect_same_bits(first, second, "run after run");

  DeviceProblem small(big);
  small.hca.num_tokens = 4;
  small.hca.num_requests = 1;  // the first request's 4 tokens
  const DeviceResult part = run_hca(small);
  const size_t per_token = static_cast<size_t>(c.heads) * kHeadDim;
  for (size_t i = 0; i < 4 * per_token; ++i) ASSERT_EQ(part.out[i], first.out[i]) << "element " << i;
  EXPECT_EQ(std::memcmp(part.lse.data(), first.lse.data(), 4 * c.heads * sizeof(float)), 0);
}

// PDL: the expand kernel waits for the previous kernel before it reads the
// metadata (a kernel writes block_table and lens late, releasing its
// dependents at once); and two calls in a row on one workspace, both with
// PDL, give each its own result (the second call's expand kernel must not
// overwrite the table while the first call's kernels still read it).
TEST_F(Dsv4HcaGpu, PdlWaitsForTheKernelThatWritesTheMetadata) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = batch_problem(seed, 64, 32, 4);
  DeviceProblem d(p);
  const DeviceResult want = run_hca(d);

  cudaStream_t stream = nullptr;
  testing::check_cuda(static_cast<int>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)), "stream");
  DeviceProblem late(p);
  late.hca.enable_pdl = true;
  DeviceBuffer table_source(p.block_table), lens_source(p.lens);
  prepare_outputs(late);
  late.block_table.fill_bytes(0xFF);  // -1: every slot masked until the copy lands
  late.lens.fill_bytes(0x00);         // 0: no slot
  const size_t bytes = workspace_size(late.hca);
  DeviceBuffer workspace = poisoned_workspace(bytes);
  testing::launch_delayed_copy(late.block_table.get(), table_source.get(), table_source.bytes(), 200000, stream);
  testing::launch_delayed_copy(late.lens.get(), lens_source.get(), lens_source.bytes(), 100000, stream);
  Status status = dsv4_decode_hca(late.hca, workspace.get(), bytes, stream);
  EXPECT_TRUE(status.ok()) << status.message();
  testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "stream");
  expect_same_bits(download(late), want, "after a late write of block_table and lens");

  // Two calls on one workspace: the second problem's table differs.
  const Dsv4HcaProblem p2 = batch_problem(seed + 1, 64, 32, 4);
  DeviceProblem other(p2);
  const DeviceResult want2 = run_hca(other);
  prepare_outputs(late);
  prepare_outputs(other);
  other.hca.enable_pdl = true;
  const size_t bytes2 = std::max(bytes, workspace_size(other.hca));
  DeviceBuffer shared = poisoned_workspace(bytes2);
  for (int i = 0; i < 2; ++i) {
    status = dsv4_decode_hca(late.hca, shared.get(), bytes2, stream);
    EXPECT_TRUE(status.ok()) << status.message();
    status = dsv4_decode_hca(other.hca, shared.get(), bytes2, stream);
    EXPECT_TRUE(status.ok()) << status.message();
  }
  testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "stream");
  DeviceResult got = download(late), got2 = download(other);
  // Each counter was added to twice.
  EXPECT_EQ(got.count, kCountStart + 2 * (want.count - kCountStart));
  EXPECT_EQ(got2.count, kCountStart + 2 * (want2.count - kCountStart));
  got.count = want.count, got2.count = want2.count;
  expect_same_bits(got, want, "the first of two calls on one workspace");
  expect_same_bits(got2, want2, "the second of two calls on one workspace");
  cudaStreamDestroy(stream);
}

// A CUDA graph captures the call (no allocation, no synchronization) and
// replays it with the same bits; new metadata between replays is read.
// Without PDL, then with it (a capture error only there: suspect the CUDA
// version's support of programmatic launches in graphs before the kernels).
TEST_F(Dsv4HcaGpu, CapturedInACudaGraph) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const Dsv4HcaProblem p = batch_problem(seed, 61, 12, 4);
  Dsv4HcaProblem changed = p;
  changed.lens.assign(changed.lens.size(), 100);  // below 128: no compressed slot
  DeviceProblem changed_run(changed);
  const DeviceResult want_changed = run_hca(changed_run);

  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "with PDL" : "without PDL");
    DeviceProblem d(p);
    d.hca.enable_pdl = pdl;
    const DeviceResult want = run_hca(d);
    cudaStream_t stream = nullptr;
    testing::check_cuda(static_cast<int>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)), "stream");
    const size_t bytes = workspace_size(d.hca);
    DeviceBuffer workspace = poisoned_workspace(bytes);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    testing::check_cuda(static_cast<int>(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal)), "capture");
    const Status status = dsv4_decode_hca(d.hca, workspace.get(), bytes, stream);
    testing::check_cuda(static_cast<int>(cudaStreamEndCapture(stream, &graph)), "end capture");
    ASSERT_TRUE(status.ok()) << status.message();
    testing::check_cuda(static_cast<int>(cudaGraphInstantiate(&exec, graph, 0)), "instantiate");
    for (int replay = 0; replay < 2; ++replay) {
      prepare_outputs(d);
      testing::check_cuda(static_cast<int>(cudaGraphLaunch(exec, stream)), "replay");
      testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "replay");
      expect_same_bits(download(d), want, "graph replay");
    }
    testing::check_cuda(static_cast<int>(cudaMemcpy(d.lens.get(), changed.lens.data(), changed.lens.size() * 4,
                                                    cudaMemcpyHostToDevice)),
                        "lens");
    prepare_outputs(d);
    testing::check_cuda(static_cast<int>(cudaGraphLaunch(exec, stream)), "replay");
    testing::check_cuda(static_cast<int>(cudaStreamSynchronize(stream)), "replay");
    expect_same_bits(download(d), want_changed, "graph replay with new lens");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace sparse_decode
