// Argument validation of dsa_decode (src/dsa/validate.cpp): every refusal,
// through validate(), supports() and dsa_decode(), names its argument and
// the expected value and writes nothing; valid calls pass; device memory is
// NotSupported without a CUDA device; the workspace size and dsa_splits_for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "reference/dsa_reference.h"
#include "support/test_support.h"
#include "testing/device_buffer.h"
#include "testing/dsa_problem.h"

namespace sparse_decode {
namespace {

// A valid host-memory call with every optional argument in use (FP8 cache
// with scales, a gate, G = 2, query_len = 2) and a poisoned output.
class ValidCall {
 public:
  ValidCall(uint64_t seed, DType cache_dtype = DType::kFloat8E4M3) {
    testing::DsaProblemConfig config;
    config.requests = 2;
    config.query_len = 2;
    config.groups = 2;
    config.heads = 4;
    config.block_size = 8;
    config.regions = 4;
    config.max_blocks = 6;
    config.cache_dtype = cache_dtype;
    config.splits = 2;
    config.seed = seed;
    problem_ = testing::make_dsa_problem(config);
    out_.assign(static_cast<size_t>(problem_.rows()) * config.heads * kDsaHeadDim, test::kOutPoison);
    args = problem_.host_args(out_.data());
  }

  bool untouched() const {
    return std::all_of(out_.begin(), out_.end(), [](uint16_t v) { return v == test::kOutPoison; });
  }
  bool fully_written() const {
    return std::none_of(out_.begin(), out_.end(), [](uint16_t v) { return v == test::kOutPoison; });
  }

  DsaDecodeArgs args;

 private:
  testing::DsaProblem problem_;
  std::vector<uint16_t> out_;
};

template <typename T>
const T* shifted(const void* pointer, int bytes) {
  return reinterpret_cast<const T*>(static_cast<const char*>(pointer) + bytes);
}

struct Refusal {
  std::string label;
  std::function<void(DsaDecodeArgs&)> breaks;
  std::string names;  // substring the message must contain
  DType cache_dtype = DType::kFloat8E4M3;
};

std::vector<Refusal> refusals() {
  using A = DsaDecodeArgs;
  const DType bf16 = DType::kBFloat16;
  static const float kScale = 1.0f;
  return {
      {"memory", [](A& a) { a.memory = static_cast<MemorySpace>(4); }, "memory: expected kDevice or kHost"},
      {"num_rows_negative", [](A& a) { a.num_rows = -8; }, "num_rows: expected >= 0"},
      {"num_rows_not_multiple_of_groups", [](A& a) { a.num_rows = 7; }, "num_rows: expected a multiple of"},
      {"num_rows_not_multiple_of_request", [](A& a) { a.num_rows = 6; }, "num_groups * query_len = 4"},
      {"num_groups_0", [](A& a) { a.num_groups = 0; }, "num_groups: expected >= 1"},
      {"num_heads_0", [](A& a) { a.num_heads = 0; }, "num_heads: expected 1..16"},
      {"num_heads_17", [](A& a) { a.num_heads = 17; }, "num_heads: expected 1..16"},
      {"block_size_0", [](A& a) { a.block_size = 0; }, "block_size: expected >= 1"},
      {"num_regions_0", [](A& a) { a.num_regions = 0; }, "num_regions: expected >= 1"},
      {"query_len_0", [](A& a) { a.query_len = 0; }, "query_len: expected >= 1"},
      {"splits_0", [](A& a) { a.splits = 0; }, "splits: expected 1..32"},
      {"splits_33", [](A& a) { a.splits = 33; }, "splits: expected 1..32"},
      {"scale_nan", [](A& a) { a.scale = NAN; }, "scale: expected a number"},
      {"kernel_value", [](A& a) { a.kernel = static_cast<DsaKernel>(4); },
       "kernel: expected kAuto, kStaged, kDirect or kDirectCluster, got 4"},
      {"kernel_direct_bf16", [](A& a) { a.kernel = DsaKernel::kDirect; },
       "kernel: kDirect expects cache_dtype kFloat8E4M3, got 1", bf16},
      {"kernel_direct_cluster_bf16", [](A& a) { a.kernel = DsaKernel::kDirectCluster; },
       "kernel: kDirectCluster expects cache_dtype kFloat8E4M3, got 1", bf16},
      {"splits_cluster_17",
       [](A& a) {
         a.kernel = DsaKernel::kDirectCluster;
         a.splits = 17;
         a.num_regions = 17;
       },
       "splits: kDirectCluster runs at most 16 splits a row"},
      {"q_null", [](A& a) { a.q = nullptr; }, "q: expected a non-null"},
      {"q_unaligned", [](A& a) { a.q = shifted<void>(a.q, 2); }, "q: expected a 16-byte aligned"},
      {"q_head_stride_negative", [](A& a) { a.q_head_stride = -8; }, "q_head_stride: expected"},
      {"q_head_stride_unaligned", [](A& a) { a.q_head_stride = 196; }, "q_head_stride: expected"},
      {"q_row_stride_unaligned", [](A& a) { a.q_row_stride += 4; }, "q_row_stride: expected"},
      {"out_null", [](A& a) { a.out = nullptr; }, "out: expected a non-null"},
      {"out_unaligned", [](A& a) { a.out = static_cast<char*>(a.out) + 8; }, "out: expected a 16-byte aligned"},
      {"out_head_stride_overlap", [](A& a) { a.out_head_stride = 184; }, "out_head_stride: expected >= 192"},
      {"out_head_stride_unaligned", [](A& a) { a.out_head_stride = 196; }, "out_head_stride: expected >= 192"},
      {"out_head_stride_wraps", [](A& a) { a.out_head_stride = int64_t{1} << 62; }, "out_row_stride: expected"},
      {"cache_slot_stride_wraps", [](A& a) { a.cache_slot_stride = int64_t{1} << 60; }, "cache_group_stride: expected"},
      {"out_row_stride_overlap", [](A& a) { a.out_row_stride -= 8; }, "out_row_stride: expected >= (heads - 1)"},
      {"out_row_stride_unaligned", [](A& a) { a.out_row_stride += 2; }, "out_row_stride: expected >= (heads - 1)"},
      {"cache_dtype", [](A& a) { a.cache_dtype = static_cast<DType>(7); }, "cache_dtype: expected kBFloat16 or"},
      {"cache_null", [](A& a) { a.cache = nullptr; }, "cache: expected a non-null"},
      {"cache_unaligned", [](A& a) { a.cache = shifted<void>(a.cache, 1); }, "cache: expected a 16-byte"},
      {"num_pages_0", [](A& a) { a.num_pages = 0; }, "num_pages: expected >= 1"},
      {"cache_slot_stride_short", [](A& a) { a.cache_slot_stride = 368; }, "cache_slot_stride: expected >= 384"},
      {"cache_slot_stride_unaligned_fp8", [](A& a) { a.cache_slot_stride = 392; }, "cache_slot_stride: expected"},
      {"cache_slot_stride_unaligned_bf16", [](A& a) { a.cache_slot_stride = 388; }, "cache_slot_stride: expected",
       bf16},
      {"cache_group_stride_short", [](A& a) { a.cache_group_stride -= 16; },
       "cache_group_stride: expected >= block_size * cache_slot_stride = 3072"},
      {"cache_group_stride_unaligned", [](A& a) { a.cache_group_stride += 4; }, "cache_group_stride: expected",
       bf16},
      {"cache_page_stride_short", [](A& a) { a.cache_page_stride -= 16; },
       "cache_page_stride: expected >= num_groups * cache_group_stride = 6144"},
      {"cache_page_stride_unaligned", [](A& a) { a.cache_page_stride += 8; }, "cache_page_stride: expected"},
      {"k_scale_null_fp8", [](A& a) { a.k_scale = nullptr; }, "k_scale: expected a non-null pointer with an FP8"},
      {"v_scale_null_fp8", [](A& a) { a.v_scale = nullptr; }, "v_scale: expected a non-null pointer with an FP8"},
      {"k_scale_unaligned", [](A& a) { a.k_scale = shifted<float>(&kScale, 1); }, "k_scale: expected a 4-byte"},
      {"v_scale_unaligned_bf16", [](A& a) { a.v_scale = shifted<float>(&kScale, 2); }, "v_scale: expected a 4-byte",
       bf16},
      {"block_table_null", [](A& a) { a.block_table = nullptr; }, "block_table: expected a non-null"},
      {"block_table_unaligned", [](A& a) { a.block_table = shifted<int32_t>(a.block_table, 2); },
       "block_table: expected a 4-byte"},
      {"max_blocks_0", [](A& a) { a.max_blocks = 0; }, "max_blocks: expected >= 1"},
      {"block_table_stride_short", [](A& a) { a.block_table_stride = a.max_blocks - 1; },
       "block_table_stride: expected >= max_blocks = 6"},
      {"num_requests_short", [](A& a) { a.num_requests = 1; },
       "num_requests: expected >= num_rows / (num_groups * query_len) = 2"},
      {"regions_null", [](A& a) { a.regions = nullptr; }, "regions: expected a non-null"},
      {"regions_unaligned", [](A& a) { a.regions = shifted<int32_t>(a.regions, 1); }, "regions: expected a 4-byte"},
      {"regions_stride_short", [](A& a) { a.regions_stride = a.num_regions - 1; },
       "regions_stride: expected >= num_regions = 4"},
      {"positions_null", [](A& a) { a.positions = nullptr; }, "positions: expected a non-null"},
      {"positions_unaligned", [](A& a) { a.positions = shifted<int32_t>(a.positions, 2); },
       "positions: expected a 4-byte"},
      {"active_null", [](A& a) { a.active = nullptr; }, "active: expected a non-null"},
      {"active_unaligned", [](A& a) { a.active = shifted<int32_t>(a.active, 3); }, "active: expected a 4-byte"},
      {"gate_dtype", [](A& a) { a.gate_dtype = static_cast<DsaGateDType>(3); },
       "gate_dtype: expected kBFloat16, kFloat32 or kFloat16, got 3"},
      {"gate_unaligned_bf16", [](A& a) { a.gate = shifted<void>(a.gate, 1); }, "gate: expected a 2-byte aligned"},
      {"gate_unaligned_f16",
       [](A& a) { a.gate_dtype = DsaGateDType::kFloat16, a.gate = shifted<void>(a.gate, 1); },
       "gate: expected a 2-byte aligned"},
      {"gate_unaligned_f32",
       [](A& a) { a.gate_dtype = DsaGateDType::kFloat32, a.gate = shifted<void>(a.gate, 2); },
       "gate: expected a 4-byte aligned"},
      {"gate_token_stride_short", [](A& a) { a.gate_token_stride = a.num_groups * a.num_heads - 1; },
       "gate_token_stride: expected >= num_groups * num_heads = 8"},
  };
}

void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.label; }

class DsaValidationRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(DsaValidationRefusal, RefusedEverywhereNamingTheArgumentAndNothingWritten) {
  const Refusal& r = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed, r.cache_dtype);
  ASSERT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  DsaDecodeArgs args = call.args;
  r.breaks(args);
  for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
    if (r.label != "memory") args.memory = memory;
    SCOPED_TRACE(memory == MemorySpace::kHost ? "host memory" : "device memory");
    std::vector<char> workspace(workspace_size(call.args) + 16);
    const Status statuses[] = {validate(args), supports(args),
                               dsa_decode(args, workspace.data(), workspace.size(), nullptr)};
    for (const Status& status : statuses) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
      EXPECT_NE(status.message().find(r.names), std::string::npos) << "message: " << status.message();
    }
    EXPECT_TRUE(call.untouched()) << "a refused call wrote to out";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, DsaValidationRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

TEST(DsaValidation, ValidCallsPassAndWriteEveryRow) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    ValidCall call(seed, dtype);
    EXPECT_TRUE(supports(call.args).ok()) << supports(call.args).message();
    EXPECT_EQ(workspace_size(call.args), 0u);  // host memory needs none
    const Status status = dsa_decode(call.args, nullptr, 0, nullptr);
    EXPECT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(call.fully_written());  // clear_inactive: inactive rows are written too
  }
}

TEST(DsaValidation, ValidEdgeArguments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed, DType::kBFloat16);
  auto ok = [](const DsaDecodeArgs& a) { EXPECT_TRUE(validate(a).ok()) << validate(a).message(); };
  DsaDecodeArgs a = call.args;
  a.k_scale = a.v_scale = nullptr;  // not needed for a BF16 cache
  a.gate = nullptr;
  a.gate_token_stride = 0;
  ok(a);
  a = call.args;
  a.num_heads = 1;  // any head count up to 16; strides still fit
  ok(a);
  a = call.args;
  a.splits = kDsaMaxSplits;
  ok(a);
  a = call.args;
  a.num_requests = 100;  // a larger (graph-padded) block table
  ok(a);
  a = call.args;
  a.q_row_stride = 0, a.q_head_stride = 0;  // q broadcast: read only
  ok(a);
}

// rows = 0: Ok in both memories, nothing read (null arrays) or written; the
// checks before the shortcut still apply.
TEST(DsaValidation, ZeroRows) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  DsaDecodeArgs a = call.args;
  a.num_rows = 0;
  a.q = nullptr, a.cache = nullptr, a.regions = nullptr, a.positions = nullptr, a.active = nullptr;
  for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
    a.memory = memory;
    EXPECT_TRUE(validate(a).ok()) << validate(a).message();
    EXPECT_TRUE(supports(a).ok()) << supports(a).message();
    EXPECT_EQ(workspace_size(a), 0u);
    EXPECT_TRUE(dsa_decode(a, nullptr, 0, nullptr).ok());
  }
  EXPECT_TRUE(call.untouched());
  a.num_heads = 17;
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
}

// Without a CUDA device, device memory is NotSupported after validation
// (the device check names it) and nothing is written; a short workspace is
// refused first. With a device the GPU tests cover these calls (this one's
// pointers are host memory).
TEST(DsaValidation, DeviceMemoryWithoutADevice) {
  std::string why;
  if (testing::cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  DsaDecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  const Status support = supports(a);
  EXPECT_EQ(support.code(), StatusCode::kNotSupported) << support.message();
  EXPECT_NE(support.message().find("dsa_decode: device memory: no CUDA device"), std::string::npos)
      << support.message();

  const size_t bytes = workspace_size(a);
  std::vector<float> workspace(bytes / sizeof(float) + 4);
  EXPECT_EQ(dsa_decode(a, workspace.data(), bytes, nullptr).code(), StatusCode::kNotSupported);
  const Status short_workspace = dsa_decode(a, workspace.data(), bytes - 4, nullptr);
  EXPECT_EQ(short_workspace.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_workspace.message().find("workspace_bytes: expected >= workspace_size(args) = " +
                                           std::to_string(bytes)),
            std::string::npos)
      << short_workspace.message();
  const Status null_workspace = dsa_decode(a, nullptr, bytes, nullptr);
  EXPECT_EQ(null_workspace.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(null_workspace.message().find("workspace: expected a non-null 16-byte aligned"), std::string::npos);
  const Status unaligned = dsa_decode(a, reinterpret_cast<char*>(workspace.data()) + 4, bytes, nullptr);
  EXPECT_EQ(unaligned.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(call.untouched());
}

// The split partials: [rows, splits, heads, 192] float32 outputs, then
// [rows, splits, heads] float32 log-sum-exps; nothing with one split.
TEST(DsaValidation, WorkspaceSize) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  DsaDecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.splits = 1;
  EXPECT_EQ(workspace_size(a), 0u);
  for (int32_t splits : {2, 3, 32}) {
    a.splits = splits;
    const size_t entries = static_cast<size_t>(a.num_rows) * splits * a.num_heads;
    const size_t expected = (entries * (kDsaHeadDim + 1) * 4 + 15) / 16 * 16;
    EXPECT_EQ(workspace_size(a), expected) << "splits " << splits;
  }
  a.memory = MemorySpace::kHost;
  EXPECT_EQ(workspace_size(a), 0u);
}

// SPEC: doubling from 1 while splits < 32 and rows * splits * 2 <= 256.
TEST(DsaSplitsFor, Boundaries) {
  const std::vector<std::pair<int64_t, int32_t>> cases = {
      {1, 32}, {4, 32}, {8, 32}, {9, 16}, {16, 16}, {17, 8}, {32, 8}, {33, 4},
      {64, 4}, {65, 2}, {128, 2}, {129, 1}, {256, 1}, {100000, 1}};
  for (const auto& [rows, splits] : cases) EXPECT_EQ(dsa_splits_for(rows), splits) << "rows " << rows;
  // Every default is a valid `splits` and keeps rows * splits near 256.
  for (int64_t rows = 1; rows <= 300; ++rows) {
    const int32_t s = dsa_splits_for(rows);
    EXPECT_TRUE(s >= 1 && s <= kDsaMaxSplits && (s & (s - 1)) == 0) << rows;
    EXPECT_TRUE(s == kDsaMaxSplits || rows * s * 2 > 256) << rows;
    EXPECT_TRUE(s == 1 || rows * s <= 256) << rows;
  }
}

}  // namespace
}  // namespace sparse_decode
