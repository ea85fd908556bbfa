// What the GPU tests of dsa_decode share (SPEC section 4,
// docs/formats/dsa_layout.md): the fixture, a problem on device memory, the
// runs, and check_output, which compares a run with the fp64 reference
// (reference::dsa_decode) on the same inputs; and the cases. Problems come
// from testing::make_dsa_problem: NaN in every cache slot no visible key reads
// and in every input an inactive row would not read, so reading any of them
// shows as a NaN (or a wrong value) in `out`.
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
// Run first: --gtest_filter='*DsaGpuCases.*case0_*:DsaGpu.ZeroRows*:DsaGpu.Refused*'
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "reference/dsa_reference.h"
#include "reference/formats.h"
#include "sparse_decode/dsa_decode.h"
#include "support/gpu_test_support.h"
#include "testing/device_buffer.h"
#include "testing/dsa_problem.h"

namespace sparse_decode::gpu_test::dsa {

using testing::DeviceBuffer;
using testing::DsaProblem;
using testing::DsaProblemConfig;

inline constexpr uint16_t kOutPoison = 0xFFFF;     // kPoisonByte twice
inline constexpr uint8_t kWorkspacePoison = 0xFF;  // float NaN in every partial and lse

class DsaGpu : public gpu_test::GpuTest {};

inline void cuda(cudaError_t status, const char* what) { testing::check_cuda(static_cast<int>(status), what); }

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

// docs/formats/dsa_layout.md: float32 partials [rows][splits][heads][192]
// then lse [rows][splits][heads], rounded up to 16 bytes; 0 with one split.
inline size_t documented_workspace_bytes(const DsaDecodeArgs& a) {
  if (a.splits <= 1 || a.num_rows == 0) return 0;
  const size_t entries = static_cast<size_t>(a.num_rows) * a.splits * a.num_heads;
  return (entries * (kDsaHeadDim + 1) * 4 + 15) / 16 * 16;
}

// A workspace of `bytes` filled with `byte` (cudaMalloc: 16-byte aligned);
// empty (null pointer) for 0 bytes.
inline DeviceBuffer make_workspace(size_t bytes, uint8_t byte = kWorkspacePoison) {
  DeviceBuffer workspace(bytes);
  workspace.fill_bytes(byte);
  return workspace;
}

// One device call of `args` with a fresh poisoned workspace of
// workspace_size(args) (null for 0 bytes) on a poisoned `out`; returns out.
inline std::vector<uint16_t> run(DeviceProblem& d, const DsaDecodeArgs& args, cudaStream_t stream = nullptr) {
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

inline std::vector<uint16_t> run(DeviceProblem& d, int32_t splits, bool pdl) {
  DsaDecodeArgs args = d.args;
  args.splits = splits;
  args.enable_pdl = pdl;
  return run(d, args);
}

inline bool is_zero(uint16_t bits) { return (bits & 0x7FFF) == 0; }

// Checks one downloaded output (at `args`'s strides) against the reference
// of `p`; `what` names the run in failure messages.
inline void check_output(const std::vector<uint16_t>& out, const DsaDecodeArgs& args, const DsaProblem& p,
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
inline std::map<int32_t, int32_t> visible_keys_per_column(const DsaDecodeArgs& a, int64_t r) {
  std::map<int32_t, int32_t> per_column;
  for (const reference::DsaKey& key : reference::dsa_visible_keys(a, r)) ++per_column[key.column];
  return per_column;
}

// Rows whose visible keys of some region column are cut by the position
// (fewer than block_size keys from one column).
inline int64_t rows_with_cut_blocks(const DsaProblem& p) {
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
inline int32_t max_live_regions(const DsaProblem& p) {
  const DsaDecodeArgs a = p.host_args(nullptr);
  int32_t most = 0;
  for (int64_t r = 0; r < a.num_rows; ++r) {
    if (!p.active[r]) continue;
    most = std::max(most, static_cast<int32_t>(visible_keys_per_column(a, r).size()));
  }
  return most;
}

inline std::string run_name(int32_t splits, bool pdl) {
  return "splits " + std::to_string(splits) + (pdl ? ", PDL" : ", no PDL");
}

// ---------------------------------------------------------------------------
// The cases: every dimension of the task at least once (test_kernels.cpp
// runs each; the other tests start from one of them).

enum class Gate { kNone, kBf16, kFloat32 };

struct Case {
  const char* label;
  DType dtype;
  int heads, groups, block, query_len, regions, max_blocks, requests;
  Gate gate;
  bool strided, clear_inactive;
  Bf16Scales bf16_scales = Bf16Scales::kNanPointers;
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

inline DsaProblemConfig config_of(const Case& c, uint64_t seed) {
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

inline constexpr DType kBf16 = DType::kBFloat16;
inline constexpr DType kFp8 = DType::kFloat8E4M3;

inline const Case kCases[] = {
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
    // Two and sixteen regions a tile (region_key_shift), with cut and masked regions among them.
    {"fp8_h16_g2_b32_q3_R12_gate_bf16", kFp8, 16, 2, 32, 3, 12, 16, 3, Gate::kBf16, false, true},
    {"bf16_h4_g1_b4_q1_R40_strided", kBf16, 4, 1, 4, 1, 40, 48, 3, Gate::kNone, true, true},
    // One split walks 300 columns: two batches of the column table, a shared KV tile at the first one's end.
    {"fp8_h4_g1_b16_q1_R300", kFp8, 4, 1, 16, 1, 300, 320, 2, Gate::kNone, false, true},
    // Large-ish: 64 requests x 4 groups x query_len 2 = 512 rows of 16 heads.
    {"large_fp8_h16_g4_b64_q2_R16_gate_bf16", kFp8, 16, 4, 64, 2, 16, 16, 64, Gate::kBf16, false, true},
};

// The FP8 cases: those the direct kernel serves.
inline std::vector<Case> fp8_cases() {
  std::vector<Case> cases;
  for (const Case& c : kCases) {
    if (c.dtype == kFp8) cases.push_back(c);
  }
  return cases;
}

// The BF16 cases: those the split kernel serves under kAuto.
inline std::vector<Case> bf16_cases() {
  std::vector<Case> cases;
  for (const Case& c : kCases) {
    if (c.dtype == kBf16) cases.push_back(c);
  }
  return cases;
}

}  // namespace sparse_decode::gpu_test::dsa
