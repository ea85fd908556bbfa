// GPU tests of dsv4_decode against the fp64 reference (SPEC section 1): every
// problem runs on every kernel (cluster, stream and split), each checked
// against the reference and all compared bit for bit (but the forced cluster
// kernel of calls that run 64-head tiles: runs_64_head_tiles); FP8 problems
// unless a test says BF16. Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/dsv4_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/introspection.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_problem.h"
#include "support/delayed_copy.h"
#include "support/gpu_test_support.h"
#include "support/test_support.h"

namespace sparse_decode {
namespace {

using testing::DeviceBuffer;
using testing::Dsv4DeviceProblem;
using testing::Dsv4Problem;
using testing::Dsv4ProblemConfig;

using gpu_test::kMaxRelativeError;
using gpu_test::kPoisonByte;

class Dsv4Gpu : public gpu_test::GpuTest {};

struct Comparison {
  double relative_error = 0.0;
  int64_t non_finite = 0;
  int64_t nonzero_in_empty_tokens = 0;
  double max_lse_error = 0.0;
};

// Tokens with no active column, from the reference's own masking rule.
std::vector<bool> empty_tokens(const Dsv4DecodeArgs& host) {
  std::vector<bool> empty(host.num_tokens, true);
  for (int64_t t = 0; t < host.num_tokens; ++t)
    for (int32_t c = 0; c < host.width && empty[t]; ++c) empty[t] = !reference::dsv4_column(host, t, c).active;
  return empty;
}

// A device workspace of at least `bytes` (16-byte aligned: cudaMalloc), kept
// for the rest of the run so that calls need no allocation of their own.
void* workspace_of(size_t bytes) {
  static DeviceBuffer* workspace = nullptr;
  if (!workspace || workspace->bytes() < bytes) {
    delete workspace;
    workspace = new DeviceBuffer(std::max<size_t>(bytes, 1));
  }
  return workspace->get();
}

// dsv4_decode with the workspace it asks for.
Status decode(const Dsv4DecodeArgs& args, cudaStream_t stream) {
  const size_t bytes = workspace_size(args);
  return dsv4_decode(args, workspace_of(bytes), bytes, stream);
}

// Runs `args` (device) after poisoning out and lse, and compares with the
// reference of `host` (same problem over host pointers).
Comparison run_and_compare(const Dsv4DecodeArgs& args, const Dsv4DecodeArgs& host, DeviceBuffer& out,
                           DeviceBuffer& lse, int64_t* device_out_of_range = nullptr) {
  out.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  const Status status = decode(args, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "kernel");

  const reference::Dsv4Result ref = reference::dsv4_decode(host);
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

void expect_matches(const Comparison& c) {
  EXPECT_LE(c.relative_error, kMaxRelativeError);
  EXPECT_EQ(c.non_finite, 0);
  EXPECT_EQ(c.nonzero_in_empty_tokens, 0);
  EXPECT_LE(c.max_lse_error, 1e-3);
}

constexpr Dsv4Kernel kKernels[] = {Dsv4Kernel::kCluster, Dsv4Kernel::kStream, Dsv4Kernel::kSplit};

const char* kernel_name(Dsv4Kernel kernel) {
  return kernel == Dsv4Kernel::kCluster ? "cluster" : kernel == Dsv4Kernel::kSplit ? "split" : "stream";
}

// Whether the stream kernel and the split path of a call run 64-head tiles
// (docs/kernels/heads64.md: FP8, H = 64 or 128, W <= 1024). The cluster
// kernel keeps 16-head groups: forced on such a call it gives other bits
// (kAuto never picks it there).
bool runs_64_head_tiles(const Dsv4DecodeArgs& args) {
  return args.dtype == DType::kFloat8E4M3 && args.num_heads % 64 == 0 && args.width <= 1024;
}

// Builds a problem, lets `edit` change it, and checks each kernel against the
// reference, its out-of-range count, and that the kernels give the same bits
// (the forced cluster kernel of a 64-head-tile call: the reference only).
void check_problem(Dsv4ProblemConfig config, const std::function<void(Dsv4Problem&)>& edit = {},
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

Dsv4ProblemConfig config_for(int64_t tokens, int32_t width, DType dtype = DType::kFloat8E4M3) {
  Dsv4ProblemConfig config;
  config.tokens = tokens;
  config.width = width;
  config.dtype = dtype;
  config.seed = test::fresh_seed();
  return config;
}

const char* dtype_name(DType dtype) { return dtype == DType::kBFloat16 ? "BF16" : "FP8"; }

// Pools of `page_size`-row pages, 48 unused elements after each page, rows
// 32 elements wider than their 512 values.
void check_paged_pools_with_gaps(int64_t page_size, DType dtype) {
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
void check_varlen_requests(const Dsv4ProblemConfig& config, const std::vector<int32_t>& cum_seq_lens_q,
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
void check_four_varlen_requests(DType dtype, bool enable_pdl, int32_t heads = 16) {
  Dsv4ProblemConfig config = config_for(12, 640, dtype);
  config.heads = heads;
  config.q_len = 12;  // one SWA window for all tokens; the requests below split them
  check_varlen_requests(config, {0, 1, 4, 9, 12}, {2, 3, 130, 70}, 5, enable_pdl);
}

// Shorter lens for every token and SWA holes in every 5th (columns past the
// generated lens name NaN rows, so lens only shrink).
void shorten_lens_and_punch_holes(Dsv4Problem& p) {
  std::mt19937 rng(static_cast<uint32_t>(p.config.seed));
  for (auto& len : p.lens) len = static_cast<int32_t>(rng() % (len + 1));
  for (int64_t t = 0; t < p.config.tokens; t += 5) {
    for (int c = 0; c < kSwaColumns; c += 3) p.indices[t * p.config.width + c] = -1;
  }
}

// Tokens 0, 3 and 7 (of 12) end up with no active column: lens = 0, all -1,
// and only masked SWA columns.
void empty_three_tokens(Dsv4Problem& p) {
  p.lens[0] = 0;
  for (int c = 0; c < p.config.width; ++c) p.indices[3 * p.config.width + c] = -1;
  p.lens[7] = 64;
  for (int c = 0; c < 64; ++c) p.indices[7 * p.config.width + c] = -1;
}

// In every token: the first row past the SWA pool, INT32_MAX, and a row past
// the compressed pool (needs lens = W so that the columns are listed).
void add_out_of_range_indices(Dsv4Problem& p) {
  const int W = p.config.width;
  for (int64_t t = 0; t < p.config.tokens; ++t) {
    p.indices[t * W + 5] = static_cast<int32_t>(p.config.swa_rows);
    p.indices[t * W + 200] = std::numeric_limits<int32_t>::max();
    p.indices[t * W + W - 1] = static_cast<int32_t>(p.config.compressed_rows + t);
  }
}

TEST_F(Dsv4Gpu, WidthsAndTokenCounts) {
  // 132, 644, 1092: a last chunk of 4 columns; 384: 6-CTA clusters.
  for (int32_t width : {128, 132, 192, 384, 640, 644, 1024, 1088, 1092, 2176})
    for (int64_t tokens : {1, 6, 12, 48}) check_problem(config_for(tokens, width));
}

// 100 tokens: a forced kStream runs one CTA a token (FP8: the deep kernel,
// with P V warps from 5 chunks), past the dim halves' 66 units, at the
// widths where kAuto gives it the most work: W = 128 (2 chunks) and W =
// 2176 (groups of 3 chunks); 320 and 644 for the P V warps' first width
// (an odd count of chunks, two chunk slots) and a last chunk of 4 columns.
TEST_F(Dsv4Gpu, OneCtaATokenStreamKernelAtNarrowAndWideWidths) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16})
    for (int32_t width : {128, 320, 644, 2176}) {
      Dsv4ProblemConfig config = config_for(100, width, dtype);
      config.hole_fraction = 0.1;
      SCOPED_TRACE(dtype_name(dtype));
      check_problem(config, shorten_lens_and_punch_holes);
    }
}

// H = 8 runs as 16 heads with 8 silent ones; 32..128 as groups of 16, and
// FP8 H = 64, 128 at W <= 1024 as groups of 64 (but the cluster kernel).
TEST_F(Dsv4Gpu, HeadCounts) {
  for (int32_t heads : {8, 32, 64, 128})
    for (int64_t tokens : {1, 7, 40}) {
      Dsv4ProblemConfig config = config_for(tokens, tokens == 7 ? 2176 : 640);
      config.heads = heads;
      config.hole_fraction = 0.05;
      SCOPED_TRACE("H " + std::to_string(heads));
      check_problem(config);
    }
}

// The split path's combine kernel folds with the exact group count (one
// instance for each of 2..16 groups, for each dtype and head group size)
// and gives a unit 32 CTAs at 1 or 2 units, 8 at 3: every count at each of
// those token counts, every kernel bit-compared; FP8 and BF16 at 16 heads,
// FP8 at 64 (64-head tiles). W = 64 g (g <= 16 chunks) has g groups; 1096
// has 9 groups of 2 chunks, the last chunk 8 columns.
TEST_F(Dsv4Gpu, SplitCombineAtEveryGroupCount) {
  struct Variant {
    DType dtype;
    int heads;
  };
  const Variant variants[] = {{DType::kFloat8E4M3, 16}, {DType::kBFloat16, 16}, {DType::kFloat8E4M3, 64}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(std::string(dtype_name(v.dtype)) + ", H " + std::to_string(v.heads));
    for (int32_t groups = 2; groups <= 16; ++groups) {
      for (int64_t tokens : {1, 2, 3}) {
        Dsv4ProblemConfig config = config_for(tokens, 64 * groups, v.dtype);
        config.heads = v.heads;
        check_problem(config);
      }
    }
  }
  check_problem(config_for(2, 1096));
}

TEST_F(Dsv4Gpu, WidestWidth) {  // 128 + 16384 columns: 258 chunks, 16 groups of 17
  for (int32_t width : {128 + 16384, 16500}) {
    Dsv4ProblemConfig config = config_for(5, width);
    config.compressed_rows = 32768;
    config.hole_fraction = 0.02;
    check_problem(config);
  }
}

TEST_F(Dsv4Gpu, ManyTokens) {
  check_problem(config_for(700, 640));
  check_problem(config_for(300, 2176));
}

// BF16 q and pools (1024-byte rows): widths of one chunk a CTA, a last chunk
// of 4 columns, and groups of 3 chunks (the BF16 cluster kernel's one-tile
// walk), at T of one or several cluster waves; 8 heads (silent half) and 64.
TEST_F(Dsv4Gpu, Bf16WidthsTokensAndHeads) {
  for (int32_t width : {128, 644, 2176})
    for (int64_t tokens : {1, 6, 48})
      for (int32_t heads : {16, 8, 64}) {
        Dsv4ProblemConfig config = config_for(tokens, width, DType::kBFloat16);
        config.heads = heads;
        config.hole_fraction = 0.05;
        SCOPED_TRACE("BF16, H " + std::to_string(heads));
        check_problem(config);
      }
}

TEST_F(Dsv4Gpu, Bf16WidestWidthAndManyTokens) {
  Dsv4ProblemConfig widest = config_for(5, 128 + 16384, DType::kBFloat16);
  widest.compressed_rows = 32768;
  widest.hole_fraction = 0.02;
  check_problem(widest);
  check_problem(config_for(300, 640, DType::kBFloat16));
}

// The masking cases of the FP8 tests, on BF16 rows.
TEST_F(Dsv4Gpu, Bf16MaskedColumnsSinksAndPages) {
  Dsv4ProblemConfig holes = config_for(48, 640, DType::kBFloat16);
  holes.hole_fraction = 0.3;
  check_problem(holes, shorten_lens_and_punch_holes);
  check_problem(config_for(12, 2176, DType::kBFloat16), empty_three_tokens);
  Dsv4ProblemConfig out_of_range = config_for(12, 640, DType::kBFloat16);
  out_of_range.lens = false;
  out_of_range.heads = 32;
  check_problem(out_of_range, add_out_of_range_indices);
  check_problem(config_for(6, 640, DType::kBFloat16), [](Dsv4Problem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                   : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : 30.0f;
    }
  });
  for (int64_t page_size : {1, 61}) check_paged_pools_with_gaps(page_size, DType::kBFloat16);
  check_four_varlen_requests(DType::kBFloat16, true);
}

TEST_F(Dsv4Gpu, NoSinksNoLens) {
  Dsv4ProblemConfig config = config_for(12, 640);
  config.sinks = false;
  config.lens = false;
  check_problem(config);
}

TEST_F(Dsv4Gpu, InfiniteSinks) {
  Dsv4ProblemConfig config = config_for(6, 640);
  check_problem(config, [](Dsv4Problem& p) {
    for (size_t h = 0; h < p.sinks.size(); ++h) {
      p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                   : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : 30.0f;
    }
  });
}

// The forced stream kernel: in dim halves at 48 tokens, the deep kernel at
// 100 (at most one unit per two SMs, at most one an SM on the H200).
TEST_F(Dsv4Gpu, HolesAndShortLens) {
  for (int64_t tokens : {48, 100}) {
    Dsv4ProblemConfig config = config_for(tokens, 640);
    config.hole_fraction = 0.3;
    check_problem(config, shorten_lens_and_punch_holes);
  }
}

// Beyond one token an SM (132 on the H200) the forced stream kernel is the
// two-tile one with 2 CTAs an SM (the deep kernel serves fewer units):
// holes, short lens and infinite sinks there too, at width 640 (its
// producers refill each tile) and 128 (2 chunks: they never wait).
TEST_F(Dsv4Gpu, HolesShortLensAndInfiniteSinksBeyondOneTokenAnSm) {
  for (int32_t width : {640, 128}) {
    Dsv4ProblemConfig config = config_for(200, width);
    config.hole_fraction = 0.3;
    SCOPED_TRACE("W " + std::to_string(width));
    check_problem(config, [](Dsv4Problem& p) {
      shorten_lens_and_punch_holes(p);
      for (size_t h = 0; h < p.sinks.size(); h += 5) p.sinks[h] = std::numeric_limits<float>::infinity();
      for (size_t h = 2; h < p.sinks.size(); h += 5) p.sinks[h] = -std::numeric_limits<float>::infinity();
    });
  }
}

TEST_F(Dsv4Gpu, TokensWithNoActiveColumn) {
  Dsv4ProblemConfig config = config_for(12, 640);
  check_problem(config, empty_three_tokens);
}

// Counted once a column whatever the number of head groups that read it.
TEST_F(Dsv4Gpu, OutOfRangeIndicesAreMaskedAndCounted) {
  for (int32_t heads : {16, 8, 32, 128}) {
    Dsv4ProblemConfig config = config_for(12, 640);
    config.lens = false;
    config.heads = heads;
    SCOPED_TRACE("H " + std::to_string(heads));
    check_problem(config, add_out_of_range_indices);
  }
}

TEST_F(Dsv4Gpu, ScalesFromDevicePointers) {
  Dsv4ProblemConfig config = config_for(6, 640);
  const std::vector<float> scales = {0.03f, 1.7f};
  DeviceBuffer device_scales(scales);
  const float* bmm1 = device_scales.as<float>();
  check_problem(config, {}, [&](Dsv4DecodeArgs& args) {
    // Host args read the host copy, device args the device copy.
    const bool device = args.memory == MemorySpace::kDevice;
    args.bmm1_scale.device = device ? bmm1 : &scales[0];
    args.bmm2_scale.device = device ? bmm1 + 1 : &scales[1];
  });
}

// SWA columns past min(128, position + 1) are masked; seq_lens below the
// query length (a negative position) mask every SWA column.
TEST_F(Dsv4Gpu, SeqLensWindowUniformQueryLength) {
  for (int32_t width : {640, 2176}) {
    Dsv4ProblemConfig config = config_for(12, width);
    config.q_len = 3;
    const std::vector<int32_t> seq_lens = {1, 5, 60, 400};
    DeviceBuffer seq_lens_device(seq_lens);
    check_problem(config, {}, [&](Dsv4DecodeArgs& args) {
      const bool device = args.memory == MemorySpace::kDevice;
      args.seq_lens = device ? seq_lens_device.as<int32_t>() : seq_lens.data();
      args.num_requests = 4;
      args.q_len = 3;
    });
  }
}

TEST_F(Dsv4Gpu, SeqLensWindowVarlen) { check_four_varlen_requests(DType::kFloat8E4M3, false); }

// 700 requests of 0 to 3 tokens (empty ones included): the request search
// of the kernels goes through its pivots (700 > 256 threads).
TEST_F(Dsv4Gpu, SeqLensWindowVarlenManyRequests) {
  Dsv4ProblemConfig config = config_for(0, 640);
  std::mt19937 rng(static_cast<uint32_t>(config.seed));
  std::vector<int32_t> cum_seq_lens_q = {0}, seq_lens;
  for (int b = 0; b < 700; ++b) {
    const int32_t q_len = static_cast<int32_t>(rng() % 4);
    cum_seq_lens_q.push_back(cum_seq_lens_q.back() + q_len);
    seq_lens.push_back(q_len + static_cast<int32_t>(rng() % 200));
  }
  config.tokens = cum_seq_lens_q.back();
  config.q_len = 16;
  check_varlen_requests(config, cum_seq_lens_q, seq_lens, 3);
}

TEST_F(Dsv4Gpu, PagedPoolsWithGapsAndWideRows) {
  for (int64_t page_size : {1, 2, 61, 64}) check_paged_pools_with_gaps(page_size, DType::kFloat8E4M3);
}

TEST_F(Dsv4Gpu, StridedQueryAndOutput) {
  for (int32_t heads : {16, 8, 32, 64, 128})
    for (Dsv4Kernel kernel : kKernels) {
      Dsv4ProblemConfig config = config_for(6, 640);
      config.heads = heads;
      SCOPED_TRACE(std::string(kernel_name(kernel)) + ", H " + std::to_string(heads) + ", seed " +
                   std::to_string(config.seed));
      Dsv4Problem problem = testing::make_dsv4_problem(config);
      // q with a head stride of 1024 and a token stride of 140000 elements; out likewise padded.
      const int H = config.heads;
      const int64_t q_head = 1024, q_token = 140000, out_head = 640, out_token = H * 640 + 64, lse_token = 160;
      std::vector<uint8_t> q(static_cast<size_t>(config.tokens) * q_token, 0x7F);
      for (int64_t t = 0; t < config.tokens; ++t)
        for (int h = 0; h < H; ++h)
          std::memcpy(&q[t * q_token + h * q_head], &problem.q[(t * H + h) * kHeadDim], kHeadDim);
      Dsv4DeviceProblem device(problem);
      DeviceBuffer q_device(q), out(static_cast<size_t>(config.tokens) * out_token * 2),
          lse(config.tokens * lse_token * 4);
      Dsv4DecodeArgs args = device.args;
      args.kernel = kernel;
      args.q = q_device.get();
      args.q_token_stride = q_token;
      args.q_head_stride = q_head;
      args.out = out.get();
      args.out_token_stride = out_token;
      args.out_head_stride = out_head;
      args.lse = lse.as<float>();
      args.lse_token_stride = lse_token;
      Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
      Dsv4DecodeArgs host_strided = host;
      host_strided.q = q.data();
      host_strided.q_token_stride = q_token;
      host_strided.q_head_stride = q_head;
      host_strided.out_token_stride = out_token;
      host_strided.out_head_stride = out_head;
      host_strided.lse_token_stride = lse_token;
      expect_matches(run_and_compare(args, host_strided, out, lse));
      // The padding between heads and tokens (out and lse) is never written.
      std::vector<uint16_t> got(out.bytes() / 2);
      out.download(got.data(), out.bytes());
      for (int64_t t = 0; t < config.tokens; ++t)
        for (int h = 0; h < H; ++h)
          for (int d = kHeadDim; d < out_head && h * out_head + d < out_token; ++d)
            ASSERT_EQ(got[t * out_token + h * out_head + d], 0xFFFF);
      const std::vector<uint32_t> got_lse = lse.download<uint32_t>();
      for (int64_t t = 0; t < config.tokens; ++t)
        for (int64_t i = H; i < lse_token; ++i) ASSERT_EQ(got_lse[t * lse_token + i], 0xFFFFFFFFu);
    }
}

TEST_F(Dsv4Gpu, WithPdlAndWithoutLse) {
  Dsv4ProblemConfig config = config_for(12, 640);
  check_problem(config, {}, [](Dsv4DecodeArgs& args) {
    args.enable_pdl = true;
    args.lse = nullptr;
  });
}

// With PDL the decode may start while the previous kernel still writes its
// query: what it reads after the grid-dependency wait must be the new values.
// The previous kernel releases its dependents at once and writes q ~200 us
// later (the kernel before it writes the indices).
TEST_F(Dsv4Gpu, PdlWaitsForTheKernelThatWritesTheInputs) {
  for (Dsv4Kernel kernel : kKernels) {
    SCOPED_TRACE(kernel_name(kernel));
    Dsv4ProblemConfig config = config_for(kernel == Dsv4Kernel::kCluster ? 12 : 300, 640);
    Dsv4Problem problem = testing::make_dsv4_problem(config);
    Dsv4DeviceProblem device(problem);
    // The device buffers first hold another problem's query and indices.
    Dsv4ProblemConfig stale_config = config;
    stale_config.seed = config.seed + 1;
    const Dsv4Problem stale = testing::make_dsv4_problem(stale_config);
    DeviceBuffer fresh_q(problem.q), fresh_indices(problem.indices);
    cudaMemcpy(device.q.get(), stale.q.data(), stale.q.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(device.indices.get(), stale.indices.data(), stale.indices.size() * 4, cudaMemcpyHostToDevice);
    Dsv4DecodeArgs args = device.args;
    args.kernel = kernel;
    args.enable_pdl = true;
    const size_t workspace_bytes = workspace_size(args);
    void* workspace = workspace_of(workspace_bytes);  // allocated before the delayed copies start
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    device.out.fill_bytes(kPoisonByte);
    device.out_of_range_count.fill_bytes(0);
    testing::launch_delayed_copy(device.indices.get(), fresh_indices.get(), fresh_indices.bytes(), 0, stream);
    testing::launch_delayed_copy(device.q.get(), fresh_q.get(), fresh_q.bytes(), 200000, stream);
    ASSERT_TRUE(dsv4_decode(args, workspace, workspace_bytes, stream).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaStreamDestroy(stream);
    // The same call again, everything in place, is the expected output.
    const std::vector<uint16_t> got = device.out.download<uint16_t>();
    const Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
    expect_matches(run_and_compare(args, host, device.out, device.lse));
    EXPECT_EQ(got, device.out.download<uint16_t>()) << "the PDL launch read inputs before they were written";
  }
}

TEST_F(Dsv4Gpu, BitwiseIdenticalOverRepeatedRuns) {
  for (int32_t width : {640, 2176}) {
    Dsv4ProblemConfig config = config_for(12, width);
    config.hole_fraction = 0.1;
    SCOPED_TRACE("seed " + std::to_string(config.seed));
    Dsv4Problem problem = testing::make_dsv4_problem(config);
    Dsv4DeviceProblem device(problem);
    std::vector<uint16_t> first;
    for (Dsv4Kernel kernel : kKernels) {
      device.args.kernel = kernel;
      for (int run = 0; run < 100; ++run) {
        device.out.fill_bytes(static_cast<uint8_t>(run));
        ASSERT_TRUE(decode(device.args, nullptr).ok());
        std::vector<uint16_t> got = device.out.download<uint16_t>();
        if (first.empty()) first = got;
        ASSERT_EQ(std::memcmp(first.data(), got.data(), got.size() * 2), 0)
            << kernel_name(kernel) << " kernel, run " << run;
      }
    }
  }
}

TEST_F(Dsv4Gpu, ZeroTokensLaunchesNothing) {
  Dsv4ProblemConfig config = config_for(0, 640);
  Dsv4Problem problem = testing::make_dsv4_problem(config);
  Dsv4DeviceProblem device(problem);
  EXPECT_TRUE(decode(device.args, nullptr).ok());
  testing::check_cuda(static_cast<int>(cudaDeviceSynchronize()), "sync");
}

TEST_F(Dsv4Gpu, SmallBatchLimitIsReported) {
  Dsv4DecodeArgs args;
  args.width = 640;
  EXPECT_GT(dsv4_small_batch_max_tokens(args), 0);
  args.dtype = DType::kBFloat16;
  EXPECT_GT(dsv4_small_batch_max_tokens(args), 0);
}

// Tokens `picks` of `source`, in that order, as a problem of their own (same pools).
Dsv4Problem select_tokens(const Dsv4Problem& source, const std::vector<int64_t>& picks) {
  Dsv4Problem batch = source;
  const int64_t T = static_cast<int64_t>(picks.size());
  const size_t q_bytes = size_t(source.config.heads) * kHeadDim * source.element_bytes();
  const size_t W = source.config.width;
  batch.config.tokens = T;
  batch.q.resize(T * q_bytes);
  batch.indices.resize(T * W);
  if (!source.lens.empty()) batch.lens.resize(T);
  for (int64_t i = 0; i < T; ++i) {
    std::memcpy(&batch.q[i * q_bytes], &source.q[picks[i] * q_bytes], q_bytes);
    std::memcpy(&batch.indices[i * W], &source.indices[picks[i] * W], W * sizeof(int32_t));
    if (!source.lens.empty()) batch.lens[i] = source.lens[picks[i]];
  }
  return batch;
}

// Tracks 6 tokens of a problem of 5000 through batches of 1, 7, 64, 100 and
// 5000 (kAuto at 16 heads, H200: W 640 split for 1 and 7, the stream kernel
// in dim halves for 64, one CTA a token for 100 (FP8: the deep kernel);
// W 2176 cluster for 1 and 7, for 64 split (FP8) or the halves (BF16), the
// stream kernel for 100; the two-tile stream kernel for 5000) and expects
// their bits to stay the same. The forced kernels of check_problem cover
// the cluster kernel at W 640.
void check_batch_invariance(DType dtype, int32_t width, int32_t heads = 16) {
  Dsv4ProblemConfig config = config_for(5000, width, dtype);
  config.heads = heads;
  config.hole_fraction = 0.05;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + ", seed " + std::to_string(config.seed) + ", W " +
               std::to_string(width) + ", H " + std::to_string(heads));
  const Dsv4Problem source = testing::make_dsv4_problem(config);
  std::mt19937_64 rng(config.seed);
  const std::vector<int64_t> tracked = {0, 1, 2, 4999, 2500, 77};
  std::vector<std::vector<uint16_t>> expected(tracked.size());
  const size_t token_values = size_t(config.heads) * kHeadDim;
  for (int64_t batch_size : {1, 7, 64, 100, 5000}) {
    // Batch 1 runs each tracked token alone; larger batches hold them all at
    // random places among random other tokens.
    const int64_t runs = batch_size == 1 ? static_cast<int64_t>(tracked.size()) : 1;
    for (int64_t run = 0; run < runs; ++run) {
      std::vector<int64_t> picks(batch_size);
      for (int64_t& pick : picks) pick = static_cast<int64_t>(rng() % config.tokens);
      std::vector<int64_t> place(tracked.size(), -1);
      if (batch_size == 1) {
        picks[0] = tracked[run], place[run] = 0;
      } else {
        std::vector<int64_t> positions(batch_size);
        for (int64_t i = 0; i < batch_size; ++i) positions[i] = i;
        std::shuffle(positions.begin(), positions.end(), rng);
        for (size_t k = 0; k < tracked.size(); ++k) picks[positions[k]] = tracked[k], place[k] = positions[k];
      }
      Dsv4DeviceProblem device(select_tokens(source, picks));
      SCOPED_TRACE("batch " + std::to_string(batch_size) + " on the " +
                   kernel_name(dsv4_chosen_kernel(device.args)) + " kernel");
      device.out.fill_bytes(kPoisonByte);
      ASSERT_TRUE(decode(device.args, nullptr).ok());
      const std::vector<uint16_t> out = device.out.download<uint16_t>();
      for (size_t k = 0; k < tracked.size(); ++k) {
        if (place[k] < 0) continue;
        const std::vector<uint16_t> got(out.begin() + place[k] * token_values,
                                        out.begin() + (place[k] + 1) * token_values);
        if (expected[k].empty()) {
          expected[k] = got;
        } else {
          EXPECT_EQ(got, expected[k]) << "token " << tracked[k] << " changed bits";
        }
      }
    }
  }
}

// A token's output has the same bits whatever the batch around it and
// whichever kernel dsv4_decode picks for that batch size (issue #4).
TEST_F(Dsv4Gpu, BatchInvariance) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    for (int32_t width : {640, 2176}) check_batch_invariance(dtype, width);
    check_batch_invariance(dtype, 644, 32);
  }
}

// H = 64 (issue #5): at W = 640 kAuto picks the 64-head split path (batches
// of 1, 7) or the 64-head stream kernel (64: in dim halves on an H200; 100,
// 5000: a CTA a unit), never the 16-head cluster kernel; at W = 2176 the
// 16-head kernels, the cluster kernel included.
TEST_F(Dsv4Gpu, BatchInvarianceHeads64) {
  for (int32_t width : {640, 2176}) check_batch_invariance(DType::kFloat8E4M3, width, 64);
}

// 64-head tiles (docs/kernels/heads64.md) with every masking path: holes and
// short lens, tokens with no active column, sinks of +-inf, varlen seq_lens
// windows, out-of-range indices (counted once a column), a last chunk of 4
// columns, W = 128 (the stream kernel alone under kAuto) and W = 1024 (16
// groups, the widest 64-head call); each kernel against the reference, the
// stream and split kernels bit for bit.
TEST_F(Dsv4Gpu, Heads64MaskedColumnsSinksAndWindows) {
  for (int32_t heads : {64, 128}) {
    SCOPED_TRACE("H " + std::to_string(heads));
    // A forced kStream runs the dim halves up to one unit per two SMs (12
    // tokens), the one-CTA-a-unit kernel beyond (100 tokens).
    for (int64_t tokens : {12, 100}) {
      Dsv4ProblemConfig holes = config_for(tokens, 640);
      holes.heads = heads;
      holes.hole_fraction = 0.3;
      SCOPED_TRACE("T " + std::to_string(tokens));
      check_problem(holes, shorten_lens_and_punch_holes);
    }
    Dsv4ProblemConfig empty = config_for(12, 640);
    empty.heads = heads;
    check_problem(empty, empty_three_tokens);
    Dsv4ProblemConfig sinks = config_for(6, 644);
    sinks.heads = heads;
    check_problem(sinks, [](Dsv4Problem& p) {
      for (size_t h = 0; h < p.sinks.size(); ++h) {
        p.sinks[h] = h % 3 == 0 ? std::numeric_limits<float>::infinity()
                     : h % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                  : 30.0f;
      }
    });
    Dsv4ProblemConfig out_of_range = config_for(12, 640);
    out_of_range.heads = heads;
    out_of_range.lens = false;
    check_problem(out_of_range, add_out_of_range_indices);
    check_four_varlen_requests(DType::kFloat8E4M3, heads == 64, heads);
    for (int32_t width : {128, 132, 1024}) {
      Dsv4ProblemConfig config = config_for(7, width);
      config.heads = heads;
      config.hole_fraction = 0.05;
      SCOPED_TRACE("W " + std::to_string(width));
      check_problem(config);
    }
  }
}

// kAuto runs the cluster (W = 640, T = 6; W = 2176, T = 6) or the stream
// kernel (W = 640, T = 32; BF16 W = 128, T = 6) where the split kernel's
// workspace is missing, too small or misaligned: the same bits as the split
// kernel.
TEST_F(Dsv4Gpu, AutoWithoutTheSplitWorkspaceRunsAnotherKernel) {
  struct Case {
    int64_t tokens;
    int32_t width;
    DType dtype;
  };
  for (const Case& c : {Case{6, 640, DType::kFloat8E4M3}, Case{32, 640, DType::kFloat8E4M3},
                        Case{6, 2176, DType::kFloat8E4M3}, Case{6, 128, DType::kBFloat16}}) {
    Dsv4ProblemConfig config = config_for(c.tokens, c.width, c.dtype);
    Dsv4Problem problem = testing::make_dsv4_problem(config);
    Dsv4DeviceProblem device(problem);
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + ", W " + std::to_string(c.width) + ", T " +
                 std::to_string(c.tokens) + ", seed " + std::to_string(config.seed));
    ASSERT_EQ(dsv4_chosen_kernel(device.args), Dsv4Kernel::kSplit);
    const size_t bytes = workspace_size(device.args);
    ASSERT_GT(bytes, 0u);
    ASSERT_TRUE(dsv4_decode(device.args, workspace_of(bytes), bytes, nullptr).ok());
    const std::vector<uint16_t> split = device.out.download<uint16_t>();
    char* workspace = static_cast<char*>(workspace_of(bytes + 16));
    const std::pair<void*, size_t> short_workspaces[] = {{nullptr, 0}, {workspace, bytes - 16}, {workspace + 8, bytes}};
    for (const auto& [pointer, size] : short_workspaces) {
      device.out.fill_bytes(kPoisonByte);
      ASSERT_TRUE(dsv4_decode(device.args, pointer, size, nullptr).ok());
      EXPECT_EQ(device.out.download<uint16_t>(), split);
      Dsv4DecodeArgs forced = device.args;
      forced.kernel = Dsv4Kernel::kSplit;
      const Status status = dsv4_decode(forced, pointer, size, nullptr);
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
    }
  }
}

TEST_F(Dsv4Gpu, AutoChoosesClusterSplitOrStreamByTokens) {
  Dsv4DecodeArgs args;
  args.width = 640;
  args.num_tokens = 1;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 32;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 48;  // the stream kernel's dim halves from 38 tokens (dispatch.md, eighth session)
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 64;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.width = 128;  // 2 groups, FP8: no split, and the stream kernel beats the cluster kernel at every T
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 1;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.dtype = DType::kBFloat16;  // width 128, BF16: the split path up to 16 tokens
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 16;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 17;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_heads = 128;  // units are (token, 16-head group) pairs: 8 a token
  args.num_tokens = 2;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 3;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_heads = 16;
  args.width = 2176;  // above 1024, BF16: split up to 44 tokens
  args.num_tokens = 40;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 48;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 6;  // above 1024, BF16: the cluster kernel up to 8 tokens
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kCluster);
  args.dtype = DType::kFloat8E4M3;  // above 1024, FP8: split from 1 token (twelfth session)
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 1;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.num_tokens = 24;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
  args.width = 640;
  args.num_tokens = 128;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.num_tokens = 5000;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
  args.kernel = Dsv4Kernel::kCluster;
  EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kCluster);
}

// 64-head tiles (FP8, H = 64, 128, W <= 1024): the split path or the stream
// kernel, never the cluster kernel; wider calls keep the 16-head rule.
TEST_F(Dsv4Gpu, AutoAt64HeadsChoosesSplitOrStream) {
  Dsv4DecodeArgs args;
  args.width = 640;
  for (int32_t heads : {64, 128}) {
    args.num_heads = heads;
    SCOPED_TRACE("H " + std::to_string(heads));
    for (int64_t tokens : {1, 6, 12, 48, 512, 5000}) {
      args.num_tokens = tokens;
      EXPECT_NE(dsv4_chosen_kernel(args), Dsv4Kernel::kCluster) << "T " << tokens;
    }
    args.num_tokens = 1;
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
    args.num_tokens = 12;  // up to 26 units (132 SMs / 5): split
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
    args.num_tokens = 32;  // the stream kernel's dim halves
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
    args.num_tokens = 5000;
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
    args.width = 128;  // 2 groups: no split
    args.num_tokens = 1;
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kStream);
    args.width = 2176;  // 16-head groups: the split path, as for 16 heads
    EXPECT_EQ(dsv4_chosen_kernel(args), Dsv4Kernel::kSplit);
    args.width = 640;
  }
}

}  // namespace
}  // namespace sparse_decode
