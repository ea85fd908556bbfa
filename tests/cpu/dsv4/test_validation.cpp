// Argument validation of dsv4_decode (src/dsv4/validate.cpp): every refusal,
// through validate(), supports() and dsv4_decode(), names its argument and
// writes nothing; valid calls pass; device memory without a GPU is refused
// as not supported rather than crashing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sparse_decode/introspection.h"
#include "support/dsv4_checks.h"
#include "testing/device_buffer.h"
#include "testing/dsv4_problem.h"
#include "support/validation_support.h"

namespace sparse_decode {
namespace {

// A valid host-memory call with every optional argument in use (lens, sinks,
// seq_lens with a uniform q_len, lse, counter) and poisoned outputs.
class ValidCall {
 public:
  explicit ValidCall(DType dtype, uint64_t seed) {
    testing::Dsv4ProblemConfig config;
    config.dtype = dtype;
    config.tokens = 4;
    config.q_len = 2;
    config.heads = 16;
    config.width = 256;
    config.swa_rows = 512;
    config.compressed_rows = 1024;
    config.seed = seed;
    problem_ = testing::make_dsv4_problem(config);
    args = problem_.host_args(outputs.out.data(), outputs.lse.data());
    args.seq_lens = seq_lens_.data();
    args.num_requests = 2;
    args.q_len = 2;
    args.out_of_range_count = &outputs.count;
  }

  Dsv4DecodeArgs args;
  test::PoisonedOutputs outputs{4, 16};

 private:
  testing::Dsv4Problem problem_;
  std::vector<int32_t> seq_lens_ = {300, 40};
};

const int32_t kCumSeqLensQ[3] = {0, 2, 4};

template <typename T>
const T* shifted(const void* pointer, int bytes) {
  return reinterpret_cast<const T*>(static_cast<const char*>(pointer) + bytes);
}

struct Refusal {
  std::string label;
  DType dtype;
  std::function<void(Dsv4DecodeArgs&)> breaks;
  std::string names;  // substring the message must contain
};

std::vector<Refusal> refusals() {
  const DType fp8 = DType::kFloat8E4M3, bf16 = DType::kBFloat16;
  using A = Dsv4DecodeArgs;
  std::vector<Refusal> list = {
      {"memory", fp8, [](A& a) { a.memory = static_cast<MemorySpace>(5); }, "memory"},
      {"dtype", fp8, [](A& a) { a.dtype = static_cast<DType>(3); }, "dtype"},
      {"kernel", fp8, [](A& a) { a.kernel = static_cast<Dsv4Kernel>(4); }, "kernel"},
      {"num_tokens_negative", fp8, [](A& a) { a.num_tokens = -1; }, "num_tokens"},
      {"num_heads_12", fp8, [](A& a) { a.num_heads = 12; }, "num_heads"},
      {"num_heads_0", fp8, [](A& a) { a.num_heads = 0; }, "num_heads"},
      {"num_heads_256", bf16, [](A& a) { a.num_heads = 256; }, "num_heads"},
      {"width_124", fp8, [](A& a) { a.width = 124; }, "width"},
      {"width_not_multiple_of_4", fp8, [](A& a) { a.width = 254; }, "width"},
      {"width_too_large", fp8, [](A& a) { a.width = kSwaColumns + 16384 + 4; }, "width"},
      {"q_null", fp8, [](A& a) { a.q = nullptr; }, "q: "},
      {"q_unaligned_fp8", fp8, [](A& a) { a.q = shifted<void>(a.q, 1); }, "q: "},
      {"q_unaligned_bf16", bf16, [](A& a) { a.q = shifted<void>(a.q, 2); }, "q: "},
      {"q_head_stride_negative", fp8, [](A& a) { a.q_head_stride = -16; }, "q_head_stride"},
      {"q_head_stride_fp8_520", fp8, [](A& a) { a.q_head_stride = 520; }, "q_head_stride"},
      {"q_head_stride_bf16_516", bf16, [](A& a) { a.q_head_stride = 516; }, "q_head_stride"},
      {"q_token_stride_negative", fp8, [](A& a) { a.q_token_stride = -a.q_token_stride; }, "q_token_stride"},
      {"q_token_stride_unaligned", fp8, [](A& a) { a.q_token_stride += 8; }, "q_token_stride"},
      {"out_null", fp8, [](A& a) { a.out = nullptr; }, "out: "},
      {"out_unaligned", fp8, [](A& a) { a.out = static_cast<char*>(a.out) + 2; }, "out: "},
      {"out_head_stride_511", fp8, [](A& a) { a.out_head_stride = 511; }, "out_head_stride"},
      {"out_head_stride_unaligned", fp8, [](A& a) { a.out_head_stride = 516; }, "out_head_stride"},
      // Extents that wrap around 64 bits must not pass the checks.
      {"out_head_stride_wraps", fp8, [](A& a) { a.out_head_stride = int64_t{1} << 62; }, "out_token_stride"},
      {"page_size_wraps", fp8, [](A& a) { a.swa_kv.page_size = int64_t{1} << 55; }, "swa_kv.page_stride"},
      {"out_token_stride_overlap", fp8, [](A& a) { a.out_token_stride = 16 * kHeadDim - 8; }, "out_token_stride"},
      {"out_token_stride_unaligned", bf16, [](A& a) { a.out_token_stride += 4; }, "out_token_stride"},
      {"indices_null", fp8, [](A& a) { a.indices = nullptr; }, "indices: "},
      {"indices_unaligned", fp8, [](A& a) { a.indices = a.indices + 1; }, "indices: "},
      {"indices_stride_short", fp8, [](A& a) { a.indices_stride = a.width - 4; }, "indices_stride"},
      {"indices_stride_not_multiple_of_4", fp8, [](A& a) { a.indices_stride = a.width + 2; }, "indices_stride"},
      {"num_requests_0", fp8, [](A& a) { a.num_requests = 0; }, "num_requests"},
      {"q_len_0", fp8, [](A& a) { a.q_len = 0; }, "q_len"},
      {"q_len_3", fp8, [](A& a) { a.q_len = 3; }, "num_tokens: expected num_requests * q_len"},
      {"num_tokens_not_requests_times_q_len", fp8, [](A& a) { a.num_requests = 3; }, "num_tokens"},
      {"max_q_len_0", fp8, [](A& a) { a.cum_seq_lens_q = kCumSeqLensQ, a.max_q_len = 0; }, "max_q_len"},
      {"num_tokens_over_requests_times_max_q_len", fp8, [](A& a) { a.cum_seq_lens_q = kCumSeqLensQ, a.max_q_len = 1; },
       "num_tokens"},
      {"lse_token_stride", fp8, [](A& a) { a.lse_token_stride = a.num_heads - 1; }, "lse_token_stride"},
      {"lens_unaligned", fp8, [](A& a) { a.lens = shifted<int32_t>(a.lens, 2); }, "lens: "},
      {"sinks_unaligned", fp8, [](A& a) { a.sinks = shifted<float>(a.sinks, 1); }, "sinks: "},
      {"seq_lens_unaligned", fp8, [](A& a) { a.seq_lens = shifted<int32_t>(a.seq_lens, 2); }, "seq_lens: "},
      {"lse_unaligned", fp8, [](A& a) { a.lse = const_cast<float*>(shifted<float>(a.lse, 2)); }, "lse: "},
      {"scale_pointer_unaligned", fp8,
       [](A& a) { a.bmm1_scale.device = shifted<float>(a.sinks, 2); }, "bmm1_scale.device: "},
      {"bmm1_scale_nan", fp8, [](A& a) { a.bmm1_scale.value = NAN; }, "bmm1_scale"},
      {"bmm2_scale_nan", bf16, [](A& a) { a.bmm2_scale.value = NAN; }, "bmm2_scale"},
      // A compressed pool given with W == 128 is still checked, without the W > 128 note.
      {"compressed_kv_given_with_width_128", fp8, [](A& a) { a.width = kSwaColumns, a.compressed_kv.pages = 0; },
       "compressed_kv.pages"},
  };
  // The same pool checks for both pools; a broken compressed pool with
  // W > 128 also says that it is required.
  for (const char* pool_name : {"swa_kv", "compressed_kv"}) {
    const bool compressed = std::string(pool_name) == "compressed_kv";
    auto pool = [compressed](A& a) -> KvPool& { return compressed ? a.compressed_kv : a.swa_kv; };
    const std::string n = pool_name;
    const std::vector<std::tuple<std::string, DType, std::function<void(KvPool&)>>> pool_cases = {
        {".data", fp8, [](KvPool& p) { p.data = nullptr; }},
        {".data", fp8, [](KvPool& p) { p.data = shifted<void>(p.data, 1); }},
        {".data", bf16, [](KvPool& p) { p.data = shifted<void>(p.data, 8); }},
        {".pages", fp8, [](KvPool& p) { p.pages = 0; }},
        {".pages", fp8, [](KvPool& p) { p.pages = -3; }},
        {".page_size", fp8, [](KvPool& p) { p.page_size = 0; }},
        {".row_stride", fp8, [](KvPool& p) { p.row_stride = 256; }},
        {".row_stride", fp8, [](KvPool& p) { p.row_stride = 520; }},   // 520 bytes
        {".row_stride", bf16, [](KvPool& p) { p.row_stride = 516; }},  // 1032 bytes
        {".page_stride", fp8, [](KvPool& p) { p.page_stride = p.page_size * p.row_stride - 16; }},
        {".page_stride", fp8, [](KvPool& p) { p.page_stride += 8; }},
        {".page_stride", bf16, [](KvPool& p) { p.page_stride += 4; }},
    };
    for (const auto& [field, dtype, breaks] : pool_cases) {
      list.push_back({n + "_" + field.substr(1) + "_" + std::to_string(list.size()), dtype,
                      [pool, breaks](A& a) { breaks(pool(a)); }, n + field + ": expected"});
    }
  }
  return list;
}

// GoogleTest prints a parameter on failure: the label, not the bytes.
void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.label; }

class Dsv4ValidationRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(Dsv4ValidationRefusal, RefusedEverywhereNamingTheArgumentAndNothingWritten) {
  const Refusal& r = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(r.dtype, seed);
  ASSERT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  Dsv4DecodeArgs args = call.args;
  r.breaks(args);

  test::expect_refused_everywhere(
      args, r.label, r.names, [](const Dsv4DecodeArgs& a) { return dsv4_decode(a, nullptr, 0, nullptr); },
      call.outputs);
  // The compressed pool is required when W > 128, and the message says so.
  if (r.names.rfind("compressed_kv.", 0) == 0) {
    EXPECT_EQ(validate(args).message().find("required when width > 128") != std::string::npos,
              args.width > kSwaColumns);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, Dsv4ValidationRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

TEST(Dsv4Validation, ValidCallsPassAndWriteEverything) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    ValidCall call(dtype, seed);
    EXPECT_TRUE(validate(call.args).ok()) << validate(call.args).message();
    EXPECT_TRUE(supports(call.args).ok()) << supports(call.args).message();
    EXPECT_EQ(workspace_size(call.args), 0u);
    const Status status = dsv4_decode(call.args, nullptr, 0, nullptr);
    EXPECT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(call.outputs.fully_written());
  }
}

TEST(Dsv4Validation, ValidEdgeArguments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(DType::kFloat8E4M3, seed);
  auto ok = [](const Dsv4DecodeArgs& a) {
    const Status status = validate(a);
    EXPECT_TRUE(status.ok()) << status.message();
  };
  Dsv4DecodeArgs a = call.args;
  a.width = kSwaColumns;  // SWA only: no compressed pool needed
  a.compressed_kv = KvPool{};
  ok(a);
  a = call.args;
  a.cum_seq_lens_q = kCumSeqLensQ;  // varlen, T <= B * max_q_len
  a.max_q_len = 16;
  ok(a);
  a = call.args;
  a.lse = nullptr, a.lse_token_stride = 0, a.sinks = nullptr, a.lens = nullptr, a.seq_lens = nullptr;
  a.num_requests = 0, a.q_len = 0, a.out_of_range_count = nullptr;
  ok(a);
  a = call.args;
  a.bmm1_scale = {NAN, &call.args.bmm1_scale.value};  // the pointer wins over a NaN value
  ok(a);
  a = call.args;
  a.width = kSwaColumns + 16384;
  a.indices_stride = a.width;
  ok(a);
}

// T = 0 is Ok and writes nothing; the checks before the T = 0 shortcut still apply.
TEST(Dsv4Validation, ZeroTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(DType::kFloat8E4M3, seed);
  Dsv4DecodeArgs a = call.args;
  a.num_tokens = 0;
  a.q = nullptr;  // not looked at
  for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
    a.memory = memory;
    EXPECT_TRUE(validate(a).ok()) << validate(a).message();
    EXPECT_TRUE(supports(a).ok()) << supports(a).message();
    EXPECT_TRUE(dsv4_decode(a, nullptr, 0, nullptr).ok());
  }
  EXPECT_TRUE(call.outputs.untouched());
  a.num_heads = 12;
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
}

// The split kernel's workspace: its size, asked only for device memory and
// the split path, and a forced kSplit refused without enough of it (before
// any device check: on every machine).
TEST(Dsv4Validation, SplitWorkspace) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(DType::kFloat8E4M3, seed);
  Dsv4DecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.kernel = Dsv4Kernel::kSplit;
  // T = 4, 16 heads, W = 256: 4 groups of one chunk, each 32 KiB of FP32
  // P V sums and 16 (max, sum) pairs.
  EXPECT_EQ(workspace_size(a), size_t{4} * 4 * (32768 + 128));
  a.num_heads = 64;  // 4 head groups (strides for 64 heads; nothing runs)
  a.q_token_stride = a.out_token_stride = 64 * kHeadDim;
  a.lse_token_stride = 64;
  EXPECT_EQ(workspace_size(a), size_t{4} * 4 * 4 * (32768 + 128));
  a.num_heads = 8;  // one head group of 16 rows
  EXPECT_EQ(workspace_size(a), size_t{4} * 4 * (32768 + 128));
  a = call.args;
  a.memory = MemorySpace::kDevice;
  a.kernel = Dsv4Kernel::kSplit;
  a.width = 2176;  // 34 chunks: 12 groups of up to 3
  a.indices_stride = a.width;
  EXPECT_EQ(workspace_size(a), size_t{4} * 12 * (32768 + 128));
  a = call.args;
  a.memory = MemorySpace::kDevice;
  for (Dsv4Kernel other : {Dsv4Kernel::kCluster, Dsv4Kernel::kStream}) {
    a.kernel = other;
    EXPECT_EQ(workspace_size(a), 0u);
  }
  a.kernel = Dsv4Kernel::kAuto;
  a.num_tokens = 1 << 20;  // far past the split path's range: the stream kernel
  EXPECT_EQ(workspace_size(a), 0u);
  a = call.args;
  a.kernel = Dsv4Kernel::kSplit;
  EXPECT_EQ(workspace_size(a), 0u) << "host memory needs no workspace";
  a.memory = MemorySpace::kDevice;
  a.num_heads = 12;
  EXPECT_EQ(workspace_size(a), 0u) << "invalid arguments need none";
  a.num_heads = 16;
  a.num_tokens = 0;
  EXPECT_EQ(workspace_size(a), 0u);
  EXPECT_TRUE(dsv4_decode(a, nullptr, 0, nullptr).ok()) << "T = 0 needs no workspace";

  a.num_tokens = call.args.num_tokens;
  const size_t bytes = workspace_size(a);
  alignas(16) static char fake[16];  // never written: the call is refused first
  const std::pair<void*, size_t> too_little[] = {{nullptr, 0}, {nullptr, bytes}, {fake, bytes - 1}, {fake + 8, bytes}};
  for (const auto& [workspace, size] : too_little) {
    const Status status = dsv4_decode(a, workspace, size, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find("workspace_bytes"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(std::to_string(bytes)), std::string::npos) << status.message();
  }
  EXPECT_TRUE(call.outputs.untouched());
  a.memory = MemorySpace::kHost;  // the CPU backend ignores the kernel and the workspace
  EXPECT_TRUE(dsv4_decode(a, nullptr, 0, nullptr).ok());
}

// A forced kSplit at a T no buffer could serve asks for the largest size_t
// it can express instead of a wrapped (small) count, and is refused.
TEST(Dsv4Validation, SplitWorkspaceSaturates) {
  ValidCall call(DType::kFloat8E4M3, test::fresh_seed());
  Dsv4DecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.kernel = Dsv4Kernel::kSplit;
  a.seq_lens = nullptr;  // any T is then valid
  a.num_requests = 0;
  a.q_len = 0;
  size_t previous = 0;
  for (int shift : {20, 40, 44, 45, 61, 62}) {
    a.num_tokens = int64_t{1} << shift;
    SCOPED_TRACE("T = 2^" + std::to_string(shift));
    const size_t bytes = workspace_size(a);
    EXPECT_GE(bytes, previous) << "the size wrapped";
    previous = bytes;
  }
  EXPECT_EQ(previous, static_cast<size_t>(std::numeric_limits<int64_t>::max()));
  alignas(16) static char fake[16];  // never written: the call is refused first
  const Status status = dsv4_decode(a, fake, sizeof(fake), nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(call.outputs.untouched());
}

// H = 64, 128: the split path of FP8 calls up to W = 1024 runs 64-head units
// (docs/kernels/heads64.md) whose group record is four 16-head records, so
// workspace_size(args) is the bytes of 16-head groups at every dtype and
// width; a forced kCluster (16-head groups) needs none, and kAuto never
// picks the cluster kernel for a call of 64-head tiles.
TEST(Dsv4Validation, SplitWorkspaceAt64Heads) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    ValidCall call(dtype, seed);
    for (int32_t heads : {64, 128})
      for (int32_t width : {256, 640, 1024, 1088, 2176}) {
        SCOPED_TRACE(std::string(dtype == DType::kBFloat16 ? "BF16" : "FP8") + ", H " + std::to_string(heads) +
                     ", W " + std::to_string(width));
        Dsv4DecodeArgs a = call.args;
        a.memory = MemorySpace::kDevice;
        a.kernel = Dsv4Kernel::kSplit;
        a.num_heads = heads;  // strides for H heads; nothing runs
        a.q_token_stride = a.out_token_stride = int64_t{heads} * kHeadDim;
        a.lse_token_stride = heads;
        a.width = width;
        a.indices_stride = width;
        const int64_t chunks = (width + 63) / 64, per_group = (chunks + 15) / 16;
        const int64_t groups = (chunks + per_group - 1) / per_group;
        EXPECT_EQ(workspace_size(a), static_cast<size_t>(a.num_tokens * (heads / 16) * groups * (32768 + 128)));
        a.kernel = Dsv4Kernel::kCluster;
        EXPECT_EQ(workspace_size(a), 0u);
        a.kernel = Dsv4Kernel::kAuto;
        if (dtype == DType::kFloat8E4M3 && width <= 1024) {
          EXPECT_NE(dsv4_chosen_kernel(a), Dsv4Kernel::kCluster);
        }
      }
  }
}

// Device memory on a machine without a GPU: a clean NotSupported, nothing written.
TEST(Dsv4Validation, DeviceMemoryWithoutGpuIsNotSupported) {
  std::string why;
  if (testing::cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(DType::kFloat8E4M3, seed);
  Dsv4DecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  const Status support = supports(a);
  EXPECT_EQ(support.code(), StatusCode::kNotSupported) << support.message();
  EXPECT_FALSE(support.message().empty());
  const Status run = dsv4_decode(a, nullptr, 0, nullptr);
  EXPECT_EQ(run.code(), StatusCode::kNotSupported) << run.message();
  EXPECT_EQ(dsv4_small_batch_max_tokens(a), 0);
  EXPECT_TRUE(call.outputs.untouched());
}

}  // namespace
}  // namespace sparse_decode
