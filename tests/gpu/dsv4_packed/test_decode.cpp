// GPU tests of dsv4_decode_packed (SPEC section 2) against the fp64
// reference, on the edge cases of the section. Without a CUDA device every
// test reports SKIPPED. Every case draws fresh random inputs from a seed
// printed on failure (SPARSE_DECODE_TEST_SEED=<seed> replays it).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/dsv4_packed_checks.h"
#include "reference/dsv4_packed_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode_packed.h"
#include "support/delayed_copy.h"
#include "support/gpu_test_support.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode {
namespace {

using reference::PackedSegmentId;
using testing::DeviceBuffer;
using testing::Dsv4PackedProblem;
using testing::Dsv4PackedProblemConfig;

using gpu_test::kMaxRelativeError;
using gpu_test::kPoisonByte;
using gpu_test::DeviceResult;
using gpu_test::kCountStart;

class Dsv4PackedGpu : public gpu_test::GpuTest {};
// The tests that run once a kernel, forced (kCluster, kStream).
class Dsv4PackedGpuKernels : public Dsv4PackedGpu, public ::testing::WithParamInterface<Dsv4PackedKernel> {};

// A packed problem on the device (testing::Dsv4PackedDeviceProblem) with a
// workspace large enough for the split path at its T.
struct PackedDeviceProblem : testing::Dsv4PackedDeviceProblem {
  explicit PackedDeviceProblem(const Dsv4PackedProblem& p) : testing::Dsv4PackedDeviceProblem(p) {
    Dsv4PackedDecodeArgs split = args;
    split.kernel = Dsv4PackedKernel::kSplit;
    workspace = DeviceBuffer(std::max<size_t>(workspace_size(split), 16));
    workspace.fill_bytes(kPoisonByte);  // shares are written before they are read: NaN otherwise
  }
  // The call with this problem's workspace.
  Status decode(const Dsv4PackedDecodeArgs& call, cudaStream_t stream = nullptr) {
    return dsv4_decode_packed(call, workspace.get(), workspace.bytes(), stream);
  }
  DeviceBuffer workspace;
};

// Poisons out and lse, sets the counter, runs the call and downloads.
DeviceResult run_device(PackedDeviceProblem& d) {
  gpu_test::poison_outputs(d.out, d.lse, d.out_of_range_count);
  EXPECT_LE(workspace_size(d.args), d.workspace.bytes());
  const Status status = d.decode(d.args);
  EXPECT_TRUE(status.ok()) << status.message();
  return gpu_test::download_outputs(d.out, d.lse, d.out_of_range_count);
}

// Per 64-dim group over all tokens and heads (as the Python tests): a wrong
// scale of a small tile shows there even where a row's norm hides it.
void expect_dim_groups_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
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

// The device against the reference of the same problem on the host: every
// element written and finite, relative L2 error per (token, head) and per
// 64-dim group, exact zeros for tokens with no active column, lse, counter.
DeviceResult check_against_reference(const Dsv4PackedProblem& problem, PackedDeviceProblem& device,
                                     GroupCheck groups = GroupCheck::kEachRow) {
  const DeviceResult got = run_device(device);
  Dsv4PackedDecodeArgs host = problem.host_args(nullptr, nullptr);
  host.q_token_stride = device.args.q_token_stride;
  host.q_head_stride = device.args.q_head_stride;
  const reference::Dsv4Result ref = reference::dsv4_decode_packed(host);
  const int64_t T = problem.config.tokens;
  const int H = problem.config.heads;
  const std::vector<double> values = got.out_values();
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }))
      << "NaN/inf in out: a masked NaN row leaked or an element was not written";
  test::expect_rows_close(values, ref.out, T, H, kMaxRelativeError, "device out vs reference");
  if (groups == GroupCheck::kEachRow) {
    test::expect_groups_close(values, ref.out, H, kMaxRelativeError, "device out vs reference, by 64-dim group");
  } else {
    expect_dim_groups_close(values, ref.out, kMaxRelativeError);
  }
  test::expect_lse_close(got.lse, ref.lse, 1e-3, "device lse vs reference");
  EXPECT_EQ(got.count, kCountStart + ref.out_of_range);
  return got;
}

Dsv4PackedProblemConfig config_for(uint64_t seed, int64_t tokens, int32_t extra_width = 512, int64_t page_size = 64) {
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
DeviceResult check_config(const Dsv4PackedProblemConfig& config,
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

TEST_F(Dsv4PackedGpu, PageSizesTokenCountsAndWidths) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t page_size : {1, 2, 61, 64, 256})
    for (int32_t extra_width : {512, 0})
      for (int64_t tokens : {1, 6, 13}) check_config(config_for(seed + tokens, tokens, extra_width, page_size));
}

// The plan shrinks the clusters as T grows (packed_plan): 48 tokens run
// 5-CTA clusters, 130 tokens 2-CTA ones, 300 tokens one CTA a token; the
// wide segments at 140 tokens walk 68 chunks in one CTA.
TEST_F(Dsv4PackedGpu, LargerTokenCounts) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t tokens : {48, 130, 300}) check_config(config_for(seed + tokens, tokens));
  Dsv4PackedProblemConfig wide = config_for(seed + 1, 140, 4096);
  wide.swa_width = 256;
  check_config(wide);
}

// Batches of more (token, head group) units than one wave of stream-kernel
// CTAs holds (264), with several head groups and 8 padded heads, holes and
// short lens.
TEST_F(Dsv4PackedGpu, ManyUnitsACta) {
  const uint64_t seed = test::fresh_seed();
  struct Case {
    int heads;
    int64_t tokens;
    int32_t extra_width;
  };
  for (const Case& k : {Case{64, 160, 512}, Case{8, 700, 0}, Case{16, 600, 128}}) {
    Dsv4PackedProblemConfig c = config_for(seed + k.heads, k.tokens, k.extra_width);
    c.heads = k.heads;
    c.hole_fraction = 0.1;
    check_config(c);
  }
}

TEST_F(Dsv4PackedGpu, OtherHeadCounts) {
  const uint64_t seed = test::fresh_seed();
  for (int heads : {8, 32, 64, 128}) {
    Dsv4PackedProblemConfig c = config_for(seed + heads, 5);
    c.heads = heads;
    check_config(c);
  }
}

// Widths that are not multiples of 64 and wide segments: a CTA walks several chunks.
TEST_F(Dsv4PackedGpu, OddAndWideSegments) {
  const uint64_t seed = test::fresh_seed();
  // {128, 896}: 16 chunks, the largest cluster; {64, 0}: one chunk, a cluster of one CTA.
  const int32_t widths[][2] = {{130, 1024}, {1, 1}, {64, 2048}, {256, 4096}, {77, 0}, {128, 896}, {64, 0}};
  for (const auto& w : widths) {
    Dsv4PackedProblemConfig c = config_for(seed + w[1], 6, w[1]);
    c.swa_width = w[0];
    c.extra_rows = std::max<int64_t>(8192, 2 * w[1]);
    check_config(c);
  }
}

// Each segment with its own page size and gap: a kernel that read the extra
// pool with the SWA pool's geometry would fail.
TEST_F(Dsv4PackedGpu, SegmentsWithTheirOwnPageGeometry) {
  const uint64_t seed = test::fresh_seed();
  const int64_t geometries[][4] = {{64, 0, 61, 48}, {1, 16, 256, 0}, {256, 32, 2, 80}};  // swa size, gap, extra size, gap
  for (const auto& g : geometries) {
    Dsv4PackedProblemConfig c = config_for(seed + g[0] * 7 + g[2], 13, 512, g[0]);
    c.page_gap = g[1];
    c.extra_page_size = g[2];
    c.extra_page_gap = g[3];
    check_config(c);
  }
}

// Gaps between pages, of both segments.
TEST_F(Dsv4PackedGpu, PageGaps) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t page_size : {1, 61}) {
    Dsv4PackedProblemConfig c = config_for(seed + page_size, 6, 512, page_size);
    c.page_gap = 48;
    check_config(c);
  }
}

// Scale bytes over 100..150 and the extremes 0, 2, 15, 150, 160 in a fifth
// of the tiles: values from 2^-136 to 2^42. The extremes below 2^-126 are
// BF16 subnormals in the output too, so groups are compared over all rows.
TEST_F(Dsv4PackedGpu, ScaleBytesAcrossTheUe8m0Range) {
  const uint64_t seed = test::fresh_seed();
  for (int range : {0, 1}) {
    Dsv4PackedProblemConfig c = config_for(seed + range, 12);
    c.scale_min = range ? 100 : 112;
    c.scale_max = range ? 150 : 132;
    c.extreme_fraction = range ? 0.2 : 0.0;
    check_config(c, {}, range ? GroupCheck::kOverRows : GroupCheck::kEachRow);
  }
}

// No SWA lens: the unfilled window columns are -1 and every other unused
// slot of both pools is NaN; no sinks.
TEST_F(Dsv4PackedGpu, NoLensNoSinksNanSlots) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  c.swa_lens = false;
  c.sinks = false;
  c.short_fraction = 0.7;
  check_config(c);
}

TEST_F(Dsv4PackedGpu, HolesAndShortLens) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 24);
  c.hole_fraction = 0.3;
  check_config(c, [](Dsv4PackedProblem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.config.seed));
    // Shorter lens only: the columns past the generated lens name NaN rows or -1.
    for (auto& len : p.extra_lens) len = static_cast<int32_t>(rng() % (len + 1));
    for (auto& len : p.swa_lens) len = static_cast<int32_t>(rng() % (len + 1));
    for (int64_t t = 0; t < p.config.tokens; t += 5) {
      for (int c = 0; c < p.config.swa_width; c += 3) p.swa_indices[t * p.swa_stride() + c] = -1;
    }
  });
}

// Lens of 0, all -1, only masked columns, lens past the width, negative lens:
// zeros and lse = -inf (sinks or not) where nothing is active.
TEST_F(Dsv4PackedGpu, TokensWithNoActiveColumn) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  const DeviceResult r = check_config(c, [](Dsv4PackedProblem& p) {
    const int64_t swa = p.swa_stride(), extra = p.extra_stride();
    p.swa_lens[0] = 0, p.extra_lens[0] = 0;
    for (int col = 0; col < p.config.swa_width; ++col) p.swa_indices[3 * swa + col] = -1;
    for (int col = 0; col < p.config.extra_width; ++col) p.extra_indices[3 * extra + col] = -1;
    p.swa_lens[7] = -5, p.extra_lens[7] = 40;
    for (int col = 0; col < 40; ++col) p.extra_indices[7 * extra + col] = -1;
    // Past the width: the width (columns past the generated lens become -1 first).
    for (int col = p.swa_lens[9]; col < p.config.swa_width; ++col) p.swa_indices[9 * swa + col] = -1;
    for (int col = p.extra_lens[9]; col < p.config.extra_width; ++col) p.extra_indices[9 * extra + col] = -1;
    p.swa_lens[9] = 1 << 30, p.extra_lens[9] = 1 << 30;
  });
  for (int64_t t : {0, 3, 7}) {
    for (int i = 0; i < c.heads * kHeadDim; ++i) ASSERT_EQ(r.out[t * c.heads * kHeadDim + i], 0) << "token " << t;
    for (int h = 0; h < c.heads; ++h) EXPECT_EQ(r.lse[t * c.heads + h], -std::numeric_limits<float>::infinity());
  }
}

// Active columns past their pool are masked like -1 and counted once (not
// once a head group); past lens they are not counted.
TEST_F(Dsv4PackedGpu, OutOfRangeIndicesAreMaskedAndCounted) {
  for (int heads : {16, 64}) {
    Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
    c.heads = heads;
    check_config(c, [](Dsv4PackedProblem& p) {
      const int64_t swa_rows = p.swa_pages * p.config.page_size, extra_rows = p.extra_pages * p.config.page_size;
      for (int64_t t = 0; t < p.config.tokens; ++t) {
        p.swa_indices[t * p.swa_stride()] = static_cast<int32_t>(swa_rows);
        p.extra_indices[t * p.extra_stride() + 3] = std::numeric_limits<int32_t>::max();
        p.extra_indices[t * p.extra_stride() + p.config.extra_width - 1] = static_cast<int32_t>(extra_rows + t);
      }
    });
  }
}

// Heads whose FP8 dims are 2^100 below their BF16 dims, or 2^40 above: the
// stream kernel's q shift (FP16 range) must not overflow the BF16 dims or
// lose the FP8 ones.
TEST_F(Dsv4PackedGpu, QueryDimsOfVeryDifferentMagnitudes) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  check_config(c, [](Dsv4PackedProblem& p) {
    const int H = p.config.heads;
    for (int64_t t = 0; t < p.config.tokens; ++t)
      for (int h = 0; h < H; ++h) {
        if (h % 4 > 1) continue;
        const float factor = h % 4 == 0 ? 0x1p-100f : 0x1p40f;
        uint16_t* q = &p.q[(t * H + h) * kHeadDim];
        for (int d = 0; d < kPackedFp8Dims; ++d) {
          uint32_t bits = uint32_t{q[d]} << 16;
          float value;
          std::memcpy(&value, &bits, 4);
          value *= factor;  // exact: a power of two, within BF16's range
          std::memcpy(&bits, &value, 4);
          q[d] = static_cast<uint16_t>(bits >> 16);
        }
      }
  });
}

// The stream pair (two CTAs a unit, each walking half of a token's chunks):
// a second half with no active column (extra lens <= 150 leave chunks 5..9
// empty), an SWA-only token of 4 chunks (2 + 2), and 3 chunks (2 + 1).
TEST_F(Dsv4PackedGpu, StreamPairHalves) {
  const uint64_t seed = test::fresh_seed();
  Dsv4PackedProblemConfig empty_half = config_for(seed, 24);
  empty_half.hole_fraction = 0.1;
  check_config(empty_half, [](Dsv4PackedProblem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.config.seed));
    for (auto& len : p.extra_lens) len = std::min<int32_t>(len, static_cast<int32_t>(rng() % 151));
  });
  Dsv4PackedProblemConfig swa_only = config_for(seed + 1, 24, 0);
  swa_only.swa_width = 256;
  check_config(swa_only);
  Dsv4PackedProblemConfig three_chunks = config_for(seed + 2, 24, 64);
  check_config(three_chunks);
}

// The pair's halves far apart: tile 0 of the first half's rows is scaled by
// 2^74 (scale unit ~66) and of the second half's by 2^-54 (unit ~-62). q is
// only dim 448, 1 + 0.25 (head % 4): for heads with q = 1 the first half's
// scores are ~125.7 (log2) below the second's and both halves carry a share
// of dims 0..63 of the same order; for the others the first half's weight
// is 0. A fold that took the common unit from the larger unit alone (not the
// larger weighted share) flushed the second half's share for every head.
TEST_F(Dsv4PackedGpu, StreamPairHalvesOfFarApartScales) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 24);
  check_config(c, [](Dsv4PackedProblem& p) {
    std::mt19937_64 rng(p.config.seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    // q: only dim 448 (a BF16 dim), so the scores are the rows' dim 448.
    std::fill(p.q.begin(), p.q.end(), uint16_t{0});
    for (int64_t i = 0; i < p.config.tokens * p.config.heads; ++i) {
      p.q[i * kHeadDim + kPackedFp8Dims] = reference::encode_bf16(1.0 + 0.25 * (i % 4));
    }
    p.softmax_scale = 1.0f;
    // 10 chunks: the pair's first CTA walks the SWA chunks (emptied) and
    // extra columns 0..191, the second extra columns 192..511.
    for (auto& len : p.swa_lens) len = 0;
    const PackedPool pool{p.extra_pool.data(), p.extra_pages, p.extra_page_size(), p.extra_page_stride()};
    for (int64_t t = 0; t < p.config.tokens; ++t) {
      p.extra_lens[t] = p.config.extra_width;
      for (int col = 0; col < p.config.extra_width; ++col) p.extra_indices[t * p.extra_stride() + col] = col;
    }
    for (int row = 0; row < p.config.extra_width; ++row) {
      const bool first_half = row < 192;
      double values[kHeadDim];
      for (int d = 0; d < kHeadDim; ++d) values[d] = uniform(rng);
      for (int d = 0; d < kPackedTileDims; ++d) values[d] *= first_half ? 0x1p74 : 0x1p-54;
      // BF16 rounds 87.25 + k/8 to 87..88: a gap of ~125.7 (log2) at q = 1, the weight a normal float.
      values[kPackedFp8Dims] = (first_half ? 0.0 : 87.25) + 0.125 * (row % 8);
      testing::quantize_packed_row(values, const_cast<uint8_t*>(reference::packed_row_data(pool, row)),
                          const_cast<uint8_t*>(reference::packed_row_scales(pool, row)));
    }
  });
}

TEST_F(Dsv4PackedGpu, InfiniteSinks) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 6);
  const DeviceResult r = check_config(c, [](Dsv4PackedProblem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                   : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : 30.0f;
    }
  });
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int h = 0; h < c.heads; h += 3)
      for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(r.out[(t * c.heads + h) * kHeadDim + d] & 0x7FFF, 0);
}

TEST_P(Dsv4PackedGpuKernels, WithPdlAndWithoutLseOrCounter) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  const DeviceResult full = run_device(device);
  device.args.enable_pdl = true;
  device.args.lse = nullptr;
  device.args.out_of_range_count = nullptr;
  const DeviceResult lean = run_device(device);
  EXPECT_TRUE(lean.out == full.out);
  EXPECT_EQ(lean.count, kCountStart);
  const std::vector<uint32_t> poison(lean.lse.size(), 0xFFFFFFFFu);
  EXPECT_EQ(std::memcmp(lean.lse.data(), poison.data(), poison.size() * 4), 0) << "lse written without lse";
}

// With PDL the kernel may start while the previous kernel still writes q
// (it releases its dependents first and writes ~200 us later): q, indices
// and lens must be read after the grid-dependency wait.
TEST_P(Dsv4PackedGpuKernels, PdlWaitsForTheKernelThatWritesTheQuery) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  const DeviceResult expected = run_device(device);
  Dsv4PackedProblemConfig stale_config = c;
  stale_config.seed = c.seed + 1;
  const Dsv4PackedProblem stale = testing::make_dsv4_packed_problem(stale_config);
  DeviceBuffer fresh_q(problem.q);
  cudaMemcpy(device.q.get(), stale.q.data(), stale.q.size() * 2, cudaMemcpyHostToDevice);
  device.out.fill_bytes(kPoisonByte);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  testing::launch_delayed_copy(device.q.get(), fresh_q.get(), fresh_q.bytes(), 200000, stream);
  device.args.enable_pdl = true;
  ASSERT_TRUE(device.decode(device.args, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  EXPECT_TRUE(device.out.download<uint16_t>() == expected.out) << "the PDL launch read q before it was written";
}

// Strided q, out and lse: the padding between heads and tokens is never written.
TEST_P(Dsv4PackedGpuKernels, StridedQueryAndOutput) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 6);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  const int H = c.heads;
  const int64_t q_head = 1024, q_token = 20000, out_head = 640, out_token = H * 640 + 64, lse_token = 24;
  std::vector<uint16_t> q(static_cast<size_t>(c.tokens) * q_token, 0x7FC0);
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int h = 0; h < H; ++h)
      std::memcpy(&q[t * q_token + h * q_head], &problem.q[(t * H + h) * kHeadDim], kHeadDim * 2);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  DeviceBuffer q_device(q), out(static_cast<size_t>(c.tokens) * out_token * 2), lse(c.tokens * lse_token * 4);
  Dsv4PackedDecodeArgs args = device.args;
  args.q = q_device.get();
  args.q_token_stride = q_token;
  args.q_head_stride = q_head;
  args.out = out.get();
  args.out_token_stride = out_token;
  args.out_head_stride = out_head;
  args.lse = lse.as<float>();
  args.lse_token_stride = lse_token;
  out.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  ASSERT_TRUE(device.decode(args).ok());
  const std::vector<uint16_t> got = out.download<uint16_t>();
  const std::vector<float> got_lse = lse.download<float>();
  const DeviceResult contiguous = run_device(device);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      ASSERT_EQ(std::memcmp(&got[t * out_token + h * out_head], &contiguous.out[(t * H + h) * kHeadDim], kHeadDim * 2),
                0);
      for (int d = kHeadDim; d < out_head && h * out_head + d < out_token; ++d)
        ASSERT_EQ(got[t * out_token + h * out_head + d], 0xFFFF);
      EXPECT_EQ(got_lse[t * lse_token + h], contiguous.lse[t * H + h]);
    }
    for (int64_t e = int64_t{H} * out_head; e < out_token; ++e) ASSERT_EQ(got[t * out_token + e], 0xFFFF);
    for (int h = H; h < lse_token; ++h) {
      uint32_t bits;
      std::memcpy(&bits, &got_lse[t * lse_token + h], 4);
      ASSERT_EQ(bits, 0xFFFFFFFFu) << "lse padding written";
    }
  }
}

// Each kernel, forced: the same bits run after run, and a token alone gives
// the bits it gets in the batch (the cluster kernel: while the plan is the
// same; the stream kernel serves each (token, head group) with one CTA).
TEST_P(Dsv4PackedGpuKernels, BitwiseIdenticalOverRunsAndBatches) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  c.hole_fraction = 0.1;
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  device.args.kernel = GetParam();
  const DeviceResult first = run_device(device);
  for (int run = 0; run < 20; ++run) {
    device.out.fill_bytes(static_cast<uint8_t>(run));
    ASSERT_TRUE(device.decode(device.args).ok());
    ASSERT_TRUE(device.out.download<uint16_t>() == first.out) << "run " << run;
  }
  const size_t row = static_cast<size_t>(c.heads) * kHeadDim;
  for (int64_t t : {0, 5, 11}) {
    Dsv4PackedDecodeArgs one = device.args;
    one.num_tokens = 1;
    one.q = static_cast<const uint16_t*>(one.q) + t * one.q_token_stride;
    one.swa.indices += t * one.swa.indices_stride;
    one.swa.lens += t;
    one.extra.indices += t * one.extra.indices_stride;
    one.extra.lens += t;
    one.out = static_cast<uint16_t*>(one.out) + t * one.out_token_stride;
    one.lse += t * one.lse_token_stride;
    device.out.fill_bytes(kPoisonByte);
    ASSERT_TRUE(device.decode(one).ok());
    const std::vector<uint16_t> got = device.out.download<uint16_t>();
    EXPECT_EQ(std::memcmp(&got[t * row], &first.out[t * row], row * 2), 0) << "token " << t << " alone";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKernel, Dsv4PackedGpuKernels,
                         ::testing::Values(Dsv4PackedKernel::kCluster, Dsv4PackedKernel::kStream, Dsv4PackedKernel::kSplit),
                         [](const ::testing::TestParamInfo<Dsv4PackedKernel>& info) {
                           return info.param == Dsv4PackedKernel::kCluster  ? "Cluster"
                                  : info.param == Dsv4PackedKernel::kStream ? "Stream"
                                                                      : "Split";
                         });

// A forced kSplit without a workspace that fits is refused, naming the
// argument, and writes nothing; kAuto without one runs another kernel.
TEST_F(Dsv4PackedGpu, SplitPathWithoutItsWorkspace) {
  Dsv4PackedProblemConfig c = config_for(test::fresh_seed(), 12);
  SCOPED_TRACE(test::seed_message(c.seed));
  Dsv4PackedProblem problem = testing::make_dsv4_packed_problem(c);
  PackedDeviceProblem device(problem);
  const DeviceResult with_workspace = check_against_reference(problem, device);
  ASSERT_GT(workspace_size(device.args), 0u) << "kAuto at 12 tokens of 10 chunks runs the split path";
  device.args.kernel = Dsv4PackedKernel::kSplit;
  const size_t needed = workspace_size(device.args);
  for (size_t bytes : {size_t{0}, needed - 16}) {
    device.out.fill_bytes(kPoisonByte);
    const Status status = dsv4_decode_packed(device.args, bytes ? device.workspace.get() : nullptr, bytes, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
    const std::vector<uint16_t> untouched = device.out.download<uint16_t>();
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint16_t v) { return v == 0xFFFF; }));
  }
  const Status misaligned = dsv4_decode_packed(device.args, device.workspace.as<uint8_t>() + 8, needed, nullptr);
  EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument);
  device.args.kernel = Dsv4PackedKernel::kAuto;
  gpu_test::poison_outputs(device.out, device.lse, device.out_of_range_count);
  ASSERT_TRUE(dsv4_decode_packed(device.args, nullptr, 0, nullptr).ok());
  const DeviceResult without = gpu_test::download_outputs(device.out, device.lse, device.out_of_range_count);
  test::expect_rows_close(without.out_values(), with_workspace.out_values(), c.tokens, c.heads, kMaxRelativeError,
                          "kAuto without the workspace vs with it");
}

TEST_F(Dsv4PackedGpu, ZeroTokensLaunchesNothing) {
  Dsv4PackedDecodeArgs args;
  args.memory = MemorySpace::kDevice;
  args.num_tokens = 0;
  args.swa.width = 128;
  EXPECT_TRUE(supports(args).ok()) << supports(args).message();
  EXPECT_TRUE(dsv4_decode_packed(args, nullptr, 0, nullptr).ok());
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "sync");
}

}  // namespace
}  // namespace sparse_decode
