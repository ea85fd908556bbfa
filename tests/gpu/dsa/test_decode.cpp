// GPU tests of dsa_decode (SPEC section 4, docs/dsa_layout.md) on device
// memory, against the fp64 reference (reference::dsa_decode) on the same
// inputs. Problems come from testing::make_dsa_problem: NaN in every cache
// slot no visible key reads and in every input an inactive row would not
// read, so reading any of them shows as a NaN (or a wrong value) in `out`.
//
// What every run checks (check_output):
// - an active row with visible keys: its output (all heads) within relative
//   L2 3e-3 of the reference, every element finite;
// - an active row without a visible key: every element +0 or -0 (BF16);
// - an inactive row: +0 or -0 with clear_inactive, the poison (0xFFFF)
//   untouched without;
// - the padding of a strided `out` (past 192 dims, past `heads` heads):
//   the poison, untouched.
// Outputs are poisoned with 0xFF bytes (BF16 NaN) before every run and the
// workspace too (float NaN partials and lse: a combine that read a split's
// slot before the split wrote it shows). BF16 caches get k_scale/v_scale
// pointing at NaN (or null): "ignored for BF16". Every case draws fresh
// random inputs from a seed printed on failure (SPARSE_DECODE_TEST_SEED=<seed>
// replays it). Without a CUDA device every test reports SKIPPED.
//
// Run first: --gtest_filter='DsaGpuCases.*case0*:DsaGpu.ZeroRows*:DsaGpu.Refused*'
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"
#include "support/delayed_copy.h"
#include "support/gpu_test_support.h"
#include "reference/dsa_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsa_decode.h"
#include "testing/device_buffer.h"
#include "testing/dsa_problem.h"

namespace sparse_decode {
namespace {

using testing::DeviceBuffer;
using testing::DsaProblem;
using testing::DsaProblemConfig;

using gpu_test::kMaxRelativeError;
using gpu_test::kPoisonByte;

constexpr uint16_t kOutPoison = 0xFFFF;     // kPoisonByte twice
constexpr uint8_t kWorkspacePoison = 0xFF;  // float NaN in every partial and lse

class DsaGpu : public gpu_test::GpuTest {};

void cuda(cudaError_t status, const char* what) { testing::check_cuda(static_cast<int>(status), what); }


// Host bytes into an existing device buffer of the same size.
template <typename T>
void copy_to(DeviceBuffer& buffer, const std::vector<T>& host) {
  ASSERT_EQ(buffer.bytes(), host.size() * sizeof(T));
  if (!host.empty()) cuda(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice), "upload");
  cuda(cudaDeviceSynchronize(), "upload");
}

// What BF16 caches get as k_scale/v_scale ("ignored for BF16").
enum class Bf16Scales { kNanPointers, kNull };

// A problem on the device: its inputs, the scales (one float each) and out
// [rows, heads, 192] BF16, padded (head stride 200, row stride + 24) when
// `pad_out`. `args` is the device call (memory = kDevice, splits 1).
struct DeviceProblem {
  DeviceProblem(const DsaProblem& p, bool pad_out, Bf16Scales bf16_scales = Bf16Scales::kNanPointers)
      : q(gpu_test::upload(p.q)),
        cache(gpu_test::upload(p.cache)),
        block_table(gpu_test::upload(p.block_table)),
        regions(gpu_test::upload(p.regions)),
        positions(gpu_test::upload(p.positions)),
        active(gpu_test::upload(p.active)),
        gate(gpu_test::upload(p.gate)),
        k_scale(sizeof(float)),
        v_scale(sizeof(float)) {
    const bool fp8 = p.config.cache_dtype == DType::kFloat8E4M3;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float ks = fp8 ? p.k_scale : nan, vs = fp8 ? p.v_scale : nan;
    cuda(cudaMemcpy(k_scale.get(), &ks, 4, cudaMemcpyHostToDevice), "k_scale");
    cuda(cudaMemcpy(v_scale.get(), &vs, 4, cudaMemcpyHostToDevice), "v_scale");

    args = p.host_args(nullptr);
    args.memory = MemorySpace::kDevice;
    args.q = q.get();
    args.cache = cache.get();
    args.block_table = block_table.as<int32_t>();
    args.regions = regions.as<int32_t>();
    args.positions = positions.as<int32_t>();
    args.active = active.as<int32_t>();
    args.gate = p.gate.empty() ? nullptr : gate.get();
    const bool null_scales = !fp8 && bf16_scales == Bf16Scales::kNull;
    args.k_scale = null_scales ? nullptr : k_scale.as<float>();
    args.v_scale = null_scales ? nullptr : v_scale.as<float>();
    args.splits = 1;
    args.enable_pdl = false;
    if (pad_out) {
      args.out_head_stride = kDsaHeadDim + 8;
      args.out_row_stride = int64_t{p.config.heads} * args.out_head_stride + 24;
    }
    out = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(p.rows(), 1)) * args.out_row_stride * 2);
    args.out = out.get();
    cuda(cudaDeviceSynchronize(), "uploads");
  }

  // Uploads the host problem's regions, positions and scales again (the
  // buffers keep their addresses: a captured graph reads the new values).
  void reupload_regions_positions_scales(const DsaProblem& p) {
    copy_to(regions, p.regions);
    copy_to(positions, p.positions);
    if (p.config.cache_dtype == DType::kFloat8E4M3) {
      cuda(cudaMemcpy(k_scale.get(), &p.k_scale, 4, cudaMemcpyHostToDevice), "k_scale");
      cuda(cudaMemcpy(v_scale.get(), &p.v_scale, 4, cudaMemcpyHostToDevice), "v_scale");
    }
    cuda(cudaDeviceSynchronize(), "uploads");
  }

  DeviceBuffer q, cache, block_table, regions, positions, active, gate, k_scale, v_scale, out;
  DsaDecodeArgs args;
};

// docs/dsa_layout.md: float32 partials [rows][splits][heads][192] then lse
// [rows][splits][heads], rounded up to 16 bytes; 0 with one split.
size_t documented_workspace_bytes(const DsaDecodeArgs& a) {
  if (a.splits <= 1 || a.num_rows == 0) return 0;
  const size_t entries = static_cast<size_t>(a.num_rows) * a.splits * a.num_heads;
  return (entries * (kDsaHeadDim + 1) * 4 + 15) / 16 * 16;
}

// A workspace of `bytes` filled with `byte` (cudaMalloc: 16-byte aligned);
// empty (null pointer) for 0 bytes.
DeviceBuffer make_workspace(size_t bytes, uint8_t byte = kWorkspacePoison) {
  DeviceBuffer workspace(bytes);
  workspace.fill_bytes(byte);
  return workspace;
}

// One device call of `args` with a fresh poisoned workspace of
// workspace_size(args) (null for 0 bytes) on a poisoned `out`; returns out.
std::vector<uint16_t> run(DeviceProblem& d, const DsaDecodeArgs& args, cudaStream_t stream = nullptr) {
  const Status supported = supports(args);
  EXPECT_TRUE(supported.ok()) << "supports(): " << supported.message();
  const size_t bytes = workspace_size(args);
  EXPECT_EQ(bytes, documented_workspace_bytes(args)) << "splits " << args.splits;
  DeviceBuffer workspace = make_workspace(bytes);
  d.out.fill_bytes(kPoisonByte);
  const Status status = dsa_decode(args, workspace.get(), bytes, stream);
  EXPECT_TRUE(status.ok()) << status.message();
  cuda(stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize(), "dsa_decode");
  cuda(cudaGetLastError(), "dsa_decode");
  return d.out.download<uint16_t>();
}

std::vector<uint16_t> run(DeviceProblem& d, int32_t splits, bool pdl) {
  DsaDecodeArgs args = d.args;
  args.splits = splits;
  args.enable_pdl = pdl;
  return run(d, args);
}

bool is_zero(uint16_t bits) { return (bits & 0x7FFF) == 0; }

// Checks one downloaded output (at `args`'s strides) against the reference
// of `p`; `what` names the run in failure messages.
void check_output(const std::vector<uint16_t>& out, const DsaDecodeArgs& args, const DsaProblem& p,
                  const reference::DsaResult& ref, const std::string& what) {
  SCOPED_TRACE(what);
  const int heads = args.num_heads;
  int64_t bad_padding = 0, bad_inactive = 0, bad_empty = 0, non_finite = 0, rows_over = 0, checked_rows = 0;
  int64_t first_bad_padding = -1, first_bad_inactive = -1, first_bad_empty = -1, first_non_finite = -1;
  int64_t worst_row = -1;
  double worst = 0.0;
  for (int64_t r = 0; r < args.num_rows; ++r) {
    const bool active = p.active[r] != 0;
    double err2 = 0.0, ref2 = 0.0;
    for (int64_t e = 0; e < args.out_row_stride; ++e) {
      const int64_t h = e / args.out_head_stride, dim = e % args.out_head_stride;
      const uint16_t bits = out[static_cast<size_t>(r * args.out_row_stride + e)];
      if (h >= heads || dim >= kDsaHeadDim) {
        if (bits != kOutPoison && bad_padding++ == 0) first_bad_padding = r;
        continue;
      }
      if (!active) {
        const bool ok = args.clear_inactive ? is_zero(bits) : bits == kOutPoison;
        if (!ok && bad_inactive++ == 0) first_bad_inactive = r;
        continue;
      }
      const double value = reference::decode_bf16(bits);
      if (!std::isfinite(value) && non_finite++ == 0) first_non_finite = r;
      if (ref.keys[r] == 0) {
        if (!is_zero(bits) && bad_empty++ == 0) first_bad_empty = r;
        continue;
      }
      const double expected = ref.out[(static_cast<size_t>(r) * heads + h) * kDsaHeadDim + dim];
      err2 += (value - expected) * (value - expected);
      ref2 += expected * expected;
    }
    if (!active || ref.keys[r] == 0) continue;
    ++checked_rows;
    const double relative = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
    if (!(relative <= kMaxRelativeError)) ++rows_over;
    if (std::isnan(relative) || (!std::isnan(worst) && relative > worst)) worst = relative, worst_row = r;
  }
  EXPECT_EQ(non_finite, 0) << "NaN/inf written in active rows, first in row " << first_non_finite;
  EXPECT_EQ(rows_over, 0) << "rows over the relative L2 bound " << kMaxRelativeError << "; worst: row " << worst_row
                          << " (" << ref.keys[std::max<int64_t>(worst_row, 0)] << " keys) at " << worst;
  EXPECT_EQ(bad_empty, 0) << "non-zero elements in active rows without a visible key, first in row " << first_bad_empty;
  EXPECT_EQ(bad_inactive, 0) << (args.clear_inactive ? "inactive rows not zeroed" : "inactive rows written")
                             << ", first row " << first_bad_inactive;
  EXPECT_EQ(bad_padding, 0) << "out's padding written, first in row " << first_bad_padding;
  EXPECT_GT(checked_rows, 0) << "no active row with keys: the run proves little";
}

// Visible keys of row r, counted per region column.
std::map<int32_t, int32_t> visible_keys_per_column(const DsaDecodeArgs& a, int64_t r) {
  std::map<int32_t, int32_t> per_column;
  for (const reference::DsaKey& key : reference::dsa_visible_keys(a, r)) ++per_column[key.column];
  return per_column;
}

// Rows whose visible keys of some region column are cut by the position
// (fewer than block_size keys from one column).
int64_t rows_with_cut_blocks(const DsaProblem& p) {
  const DsaDecodeArgs a = p.host_args(nullptr);
  int64_t rows = 0;
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (!p.active[r]) continue;
    const std::map<int32_t, int32_t> per_column = visible_keys_per_column(a, r);
    bool cut = false;
    for (const auto& [column, count] : per_column) cut |= count < a.block_size;
    rows += cut;
  }
  return rows;
}

// Live (non-masked, visible) region columns of the row with the most.
int32_t max_live_regions(const DsaProblem& p) {
  const DsaDecodeArgs a = p.host_args(nullptr);
  int32_t most = 0;
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (!p.active[r]) continue;
    most = std::max(most, static_cast<int32_t>(visible_keys_per_column(a, r).size()));
  }
  return most;
}

std::string run_name(int32_t splits, bool pdl) {
  return "splits " + std::to_string(splits) + (pdl ? ", PDL" : ", no PDL");
}

// ---------------------------------------------------------------------------
// The cases: every dimension of the task at least once. Each runs with
// splits 1, 2, 3, 5, 32 and dsa_splits_for(rows), each without and with PDL
// (same bits), and each is checked against the reference.

enum class Gate { kNone, kBf16, kFloat32 };

struct Case {
  const char* label;
  DType dtype;
  int heads, groups, block, query_len, regions, max_blocks, requests;
  Gate gate;
  bool strided, clear_inactive;
  Bf16Scales bf16_scales = Bf16Scales::kNanPointers;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

DsaProblemConfig config_of(const Case& c, uint64_t seed) {
  DsaProblemConfig config;
  config.requests = c.requests;
  config.query_len = c.query_len;
  config.groups = c.groups;
  config.heads = c.heads;
  config.block_size = c.block;
  config.regions = c.regions;
  config.max_blocks = c.max_blocks;
  config.cache_dtype = c.dtype;
  config.gate = c.gate != Gate::kNone;
  config.gate_dtype = c.gate == Gate::kFloat32 ? DsaGateDType::kFloat32 : DsaGateDType::kBFloat16;
  config.strided = c.strided;
  config.clear_inactive = c.clear_inactive;
  config.seed = seed;
  return config;
}

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kFp8 = DType::kFloat8E4M3;

const Case kCases[] = {
    // label, cache dtype, heads, groups, block, query_len, R, max_blocks, requests, gate, strided,
    // clear_inactive[, what BF16 caches get as scales]
    {"bf16_h16_g1_b16_q1_R8", kBf16, 16, 1, 16, 1, 8, 16, 3, Gate::kNone, false, true},
    {"fp8_h16_g2_b16_q1_R8_gate_bf16", kFp8, 16, 2, 16, 1, 8, 16, 3, Gate::kBf16, false, true},
    {"bf16_h1_g1_b1_q1_R33_gate_f32", kBf16, 1, 1, 1, 1, 33, 48, 3, Gate::kFloat32, false, true, Bf16Scales::kNull},
    {"fp8_h2_g4_b7_q3_R8_gate_bf16_strided", kFp8, 2, 4, 7, 3, 8, 12, 2, Gate::kBf16, true, true},
    {"bf16_h8_g2_b64_q3_R1_gate_f32_keep_inactive", kBf16, 8, 2, 64, 3, 1, 4, 2, Gate::kFloat32, false, false},
    {"fp8_h13_g4_b128_q1_R8_cut_blocks", kFp8, 13, 4, 128, 1, 8, 8, 3, Gate::kNone, false, true},
    {"bf16_h16_g2_b16_q3_R33_gate_bf16_strided", kBf16, 16, 2, 16, 3, 33, 40, 2, Gate::kBf16, true, true},
    {"fp8_h16_g1_b64_q1_R16_keep_inactive", kFp8, 16, 1, 64, 1, 16, 16, 4, Gate::kNone, false, false},
    {"bf16_h13_g2_b7_q1_R1_strided_keep_inactive", kBf16, 13, 2, 7, 1, 1, 6, 4, Gate::kNone, true, false},
    {"fp8_h1_g4_b1_q3_R33_gate_f32", kFp8, 1, 4, 1, 3, 33, 40, 2, Gate::kFloat32, false, true},
    {"bf16_h2_g1_b128_q3_R8_cut_blocks_strided", kBf16, 2, 1, 128, 3, 8, 6, 4, Gate::kBf16, true, true},
    {"fp8_h8_g4_b16_q3_R8_gate_f32_strided_keep", kFp8, 8, 4, 16, 3, 8, 16, 2, Gate::kFloat32, true, false},
    // Large-ish: 64 requests x 4 groups x query_len 2 = 512 rows of 16 heads.
    {"large_fp8_h16_g4_b64_q2_R16_gate_bf16", kFp8, 16, 4, 64, 2, 16, 16, 64, Gate::kBf16, false, true},
};

class DsaGpuCases : public DsaGpu, public ::testing::WithParamInterface<Case> {};

TEST_P(DsaGpuCases, MatchesReferenceForEverySplit) {
  const Case& c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(c, seed));
  if (c.dtype == kFp8) {
    ASSERT_NE(p.k_scale, 1.0f);
    ASSERT_NE(p.v_scale, 1.0f);
  }
  if (c.block == 128) {
    EXPECT_GT(rows_with_cut_blocks(p), 0) << "no block cut by a position";
  }
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  DeviceProblem d(p, c.strided, c.bf16_scales);
  const int32_t rows = static_cast<int32_t>(p.rows());
  const int32_t live = max_live_regions(p);
  for (int32_t splits : {1, 2, 3, 5, 32, dsa_splits_for(rows)}) {
    std::vector<uint16_t> without_pdl;
    for (bool pdl : {false, true}) {
      const std::string name = run_name(splits, pdl) + (splits > live ? " (empty splits)" : "");
      const std::vector<uint16_t> out = run(d, splits, pdl);
      DsaDecodeArgs args = d.args;
      args.splits = splits;
      check_output(out, args, p, ref, name);
      if (!pdl) {
        without_pdl = out;
      } else {
        EXPECT_TRUE(out == without_pdl) << name << ": PDL changed the bits";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DsaGpuCases, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return "case" + std::to_string(info.index) + "_" + info.param.label; });

// ---------------------------------------------------------------------------

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

// Ids masked in every way docs/dsa_layout.md decision 6 lists, a repeated
// region (counted twice), negative positions (INT_MIN too) and a position
// of INT_MAX (every slot of its regions visible; no int32 overflow in
// position - first + 1).
DsaProblem masked_problem(uint64_t seed) {
  std::mt19937_64 rng(seed);
  DsaProblemConfig config = config_of(kCases[1], seed);
  config.requests = 4;
  config.query_len = 2;
  config.heads = 4;
  config.block_size = 8;
  config.regions = 6;
  config.max_blocks = 8;
  config.inactive_fraction = 0.0;
  config.empty_fraction = 0.0;
  DsaProblem p = testing::make_dsa_problem(config);
  const int64_t rows = p.rows();
  const int32_t R = config.regions;
  auto row_regions = [&](int64_t r) { return &p.regions[r * p.regions_stride]; };
  // Row 0 keeps what it sees (the problem's one guaranteed row with keys).
  for (int64_t r = 1; r < rows; ++r) {
    int32_t* regions = row_regions(r);
    switch (r % 6) {
      case 1:  // every kind of bad id in the -1 columns, and one repeated region
        for (int32_t c = 0; c < R; ++c) {
          if (regions[c] != -1) continue;
          const int32_t bad[] = {-2, -1000, INT_MIN, config.max_blocks, config.max_blocks + 7, INT_MAX};
          regions[c] = bad[rng() % 6];
        }
        for (int32_t c = 0; c < R; ++c) {
          if (regions[c] >= 0 && regions[c] < config.max_blocks) {
            regions[(c + 1) % R] = regions[c];  // the same region twice (or more)
            break;
          }
        }
        break;
      case 2:
        p.positions[r] = -1;
        break;
      case 3:
        p.positions[r] = INT_MIN;
        break;
      case 4: {  // INT_MAX: every slot of every named block with a valid page
        p.positions[r] = INT_MAX;
        const DsaDecodeArgs a = p.host_args(nullptr);
        for (const reference::DsaKey& key : reference::dsa_visible_keys(a, r)) {
          p.fill_slot(key.page, static_cast<int32_t>(r % config.groups), key.slot, rng());
        }
        break;
      }
      default:
        break;
    }
  }
  // Table entries outside [0, pages) for a visible block of the last request.
  const int64_t last_request = config.requests - 1;
  const int64_t last_row = rows - 1;
  const int32_t visible_block = std::min(config.max_blocks - 1, std::max(0, p.positions[last_row]) / config.block_size);
  p.block_table[last_request * p.block_table_stride + visible_block] = static_cast<int32_t>(p.pages);
  if (visible_block > 0) p.block_table[last_request * p.block_table_stride] = -7;

  return p;
}

TEST_F(DsaGpu, MaskedIdsRepeatedRegionsAndExtremePositions) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = masked_problem(seed);
  const int64_t rows = p.rows();
  const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < rows; ++r) empty_rows += ref.keys[r] == 0;
  EXPECT_GT(empty_rows, 0);
  DeviceProblem d(p, false);
  for (int32_t splits : {1, 2, 5}) check_output(run(d, splits, false), d.args, p, ref, run_name(splits, false));
}

// q with zero strides (docs/dsa_layout.md decision 10: q may broadcast):
// every row reads row 0's heads, or every head its row's head 0, or both.
TEST_F(DsaGpu, BroadcastQuery) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem base = testing::make_dsa_problem(config_of(kCases[1], seed));
  for (auto [row_stride_zero, head_stride_zero] : {std::pair{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(std::string(row_stride_zero ? "q_row_stride 0" : "") + (head_stride_zero ? " q_head_stride 0" : ""));
    DsaProblem p = base;
    if (row_stride_zero) p.q_row_stride = 0;
    if (head_stride_zero) p.q_head_stride = 0;
    const reference::DsaResult ref = reference::dsa_decode(p.host_args(nullptr));
    DeviceProblem d(p, false);
    for (int32_t splits : {1, 4}) check_output(run(d, splits, false), d.args, p, ref, run_name(splits, false));
  }
}

// rows == 0: Ok, workspace 0, nothing launched (the capture records no node)
// and nothing written; null pointers are fine too.
TEST_F(DsaGpu, ZeroRowsLaunchesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[1], seed));
  DeviceProblem d(p, false);
  DsaDecodeArgs empty_args;
  empty_args.memory = MemorySpace::kDevice;
  empty_args.num_rows = 0;
  empty_args.block_size = 16;  // validate() checks these before it sees no rows
  empty_args.num_regions = 1;
  DsaDecodeArgs zero_rows = d.args;
  zero_rows.num_rows = 0;
  for (DsaDecodeArgs args : {zero_rows, empty_args}) {
    for (int32_t splits : {1, 4, 32}) {
      SCOPED_TRACE("splits " + std::to_string(splits));
      args.splits = splits;
      EXPECT_EQ(workspace_size(args), 0u);
      const Status supported = supports(args);
      EXPECT_TRUE(supported.ok()) << supported.message();
      d.out.fill_bytes(kPoisonByte);
      cudaStream_t stream = nullptr;
      cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
      cudaGraph_t graph = nullptr;
      cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
      const Status status = dsa_decode(args, nullptr, 0, stream);
      cuda(cudaStreamEndCapture(stream, &graph), "end capture");
      EXPECT_TRUE(status.ok()) << status.message();
      size_t nodes = 0;
      cuda(cudaGraphGetNodes(graph, nullptr, &nodes), "graph nodes");
      EXPECT_EQ(nodes, 0u) << "a call with no rows launched something";
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
      EXPECT_TRUE(dsa_decode(args, nullptr, 0, nullptr).ok());
      cuda(cudaDeviceSynchronize(), "sync");
      const std::vector<uint16_t> out = d.out.download<uint16_t>();
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t b) { return b == kOutPoison; }));
    }
  }
}

// Device memory with splits > 1 needs the workspace: null or one byte short
// (or misaligned) is InvalidArgument naming it, and nothing is written (out
// and the workspace keep their poison). A bad argument too (splits 33).
TEST_F(DsaGpu, RefusedWorkspaceWritesNothing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const DsaProblem p = testing::make_dsa_problem(config_of(kCases[1], seed));
  DeviceProblem d(p, false);
  DsaDecodeArgs args = d.args;
  args.splits = 4;
  const size_t bytes = workspace_size(args);
  ASSERT_EQ(bytes, documented_workspace_bytes(args));
  ASSERT_GT(bytes, 0u);
  DeviceBuffer workspace = make_workspace(bytes + 16, 0x55);
  auto* base = static_cast<uint8_t*>(workspace.get());
  struct Refusal {
    const char* label;
    DsaDecodeArgs args;
    void* workspace;
    size_t bytes;
    const char* names;
  };
  DsaDecodeArgs bad_splits = args;
  bad_splits.splits = 33;
  const Refusal refusals[] = {
      {"null workspace, right size", args, nullptr, bytes, "workspace"},
      {"null workspace, 0 bytes", args, nullptr, 0, "workspace_bytes"},
      {"one byte short", args, base, bytes - 1, "workspace_bytes"},
      {"misaligned by 8 bytes", args, base + 8, bytes, "workspace"},
      {"splits 33", bad_splits, base, bytes + 16, "splits"},
  };
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(refusal.label);
    d.out.fill_bytes(kPoisonByte);
    const Status status = dsa_decode(refusal.args, refusal.workspace, refusal.bytes, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find(refusal.names), std::string::npos) << status.message();
    cuda(cudaDeviceSynchronize(), "sync");
    const std::vector<uint16_t> out = d.out.download<uint16_t>();
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t b) { return b == kOutPoison; }))
        << "a refused call wrote out";
    const std::vector<uint8_t> after = workspace.download<uint8_t>();
    EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == 0x55; }))
        << "a refused call wrote the workspace";
  }
  // One split needs none: null and 0 bytes run.
  args.splits = 1;
  EXPECT_EQ(workspace_size(args), 0u);
  check_output(run(d, args), args, p, reference::dsa_decode(p.host_args(nullptr)), "splits 1, no workspace");
}

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
}  // namespace sparse_decode
