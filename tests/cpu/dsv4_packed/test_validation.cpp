// Argument validation of dsv4_decode_packed (src/dsv4_packed/validate.cpp):
// every refusal, through validate(), supports() and dsv4_decode_packed(),
// names its argument and writes nothing; valid calls pass; device memory is
// served on an sm_90a GPU and refused with a reason elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "support/dsv4_packed_checks.h"
#include "testing/dsv4_packed_problem.h"
#include "support/validation_support.h"

namespace sparse_decode {
namespace {

// A valid host-memory call with every optional argument in use (both
// segments with lens, sinks, lse, counter) and poisoned outputs.
class ValidPackedCall {
 public:
  explicit ValidPackedCall(uint64_t seed) {
    testing::Dsv4PackedProblemConfig config = test::packed_config(seed, 16, 4, 256, 64);
    problem_ = testing::make_dsv4_packed_problem(config);
    args = problem_.host_args(outputs.out.data(), outputs.lse.data());
    args.out_of_range_count = &outputs.count;
  }

  Dsv4PackedDecodeArgs args;
  test::PoisonedOutputs outputs{4, 16};

 private:
  testing::Dsv4PackedProblem problem_;
};

template <typename T>
const T* shifted(const void* pointer, int bytes) {
  return reinterpret_cast<const T*>(static_cast<const char*>(pointer) + bytes);
}

struct Refusal {
  std::string label;
  std::function<void(Dsv4PackedDecodeArgs&)> breaks;
  std::string names;  // substring the message must contain
};

std::vector<Refusal> refusals() {
  using A = Dsv4PackedDecodeArgs;
  std::vector<Refusal> list = {
      {"memory", [](A& a) { a.memory = static_cast<MemorySpace>(5); }, "memory: "},
      {"num_tokens_negative", [](A& a) { a.num_tokens = -1; }, "num_tokens: "},
      {"kernel", [](A& a) { a.kernel = static_cast<Dsv4PackedKernel>(9); }, "kernel: "},
      {"batch_invariant_cluster", [](A& a) { a.batch_invariant = true, a.kernel = Dsv4PackedKernel::kCluster; },
       "batch_invariant: expected kernel kAuto, kStream or kStreamH64 with it"},
      {"batch_invariant_split", [](A& a) { a.batch_invariant = true, a.kernel = Dsv4PackedKernel::kSplit; },
       "batch_invariant: "},
      {"batch_invariant_split_h64", [](A& a) { a.batch_invariant = true, a.kernel = Dsv4PackedKernel::kSplitH64; },
       "batch_invariant: expected kernel kAuto, kStream or kStreamH64 with it (their bits do not depend on the "
       "batch), got kSplitH64"},
      {"num_heads_12", [](A& a) { a.num_heads = 12; }, "num_heads: "},
      {"num_heads_0", [](A& a) { a.num_heads = 0; }, "num_heads: "},
      {"num_heads_256", [](A& a) { a.num_heads = 256; }, "num_heads: "},
      {"q_null", [](A& a) { a.q = nullptr; }, "q: "},
      {"q_unaligned", [](A& a) { a.q = shifted<void>(a.q, 2); }, "q: "},
      {"q_head_stride_negative", [](A& a) { a.q_head_stride = -8; }, "q_head_stride: "},
      {"q_head_stride_516", [](A& a) { a.q_head_stride = 516; }, "q_head_stride: "},
      {"q_token_stride_negative", [](A& a) { a.q_token_stride = -a.q_token_stride; }, "q_token_stride: "},
      {"q_token_stride_unaligned", [](A& a) { a.q_token_stride += 4; }, "q_token_stride: "},
      {"out_null", [](A& a) { a.out = nullptr; }, "out: "},
      {"out_unaligned", [](A& a) { a.out = static_cast<char*>(a.out) + 2; }, "out: "},
      {"out_head_stride_511", [](A& a) { a.out_head_stride = 511; }, "out_head_stride: "},
      {"out_head_stride_516", [](A& a) { a.out_head_stride = 516; }, "out_head_stride: "},
      {"out_head_stride_wraps", [](A& a) { a.out_head_stride = int64_t{1} << 62; }, "out_token_stride: "},
      {"out_token_stride_overlap", [](A& a) { a.out_token_stride = 16 * kHeadDim - 8; }, "out_token_stride: "},
      {"out_token_stride_unaligned", [](A& a) { a.out_token_stride += 4; }, "out_token_stride: "},
      {"sinks_unaligned", [](A& a) { a.sinks = shifted<float>(a.sinks, 1); }, "sinks: "},
      {"lse_unaligned", [](A& a) { a.lse = const_cast<float*>(shifted<float>(a.lse, 2)); }, "lse: "},
      {"counter_unaligned",
       [](A& a) { a.out_of_range_count = const_cast<int32_t*>(shifted<int32_t>(a.out_of_range_count, 1)); },
       "out_of_range_count: "},
      {"lse_token_stride", [](A& a) { a.lse_token_stride = a.num_heads - 1; }, "lse_token_stride: "},
      {"softmax_scale_nan", [](A& a) { a.softmax_scale = NAN; }, "softmax_scale: "},
      {"extra_lens_null", [](A& a) { a.extra.lens = nullptr; }, "extra.lens: "},
      // A partly given extra segment is present, and refused naming what is missing.
      {"extra_width_0_with_indices", [](A& a) { a.extra.width = 0; }, "extra.width: "},
      {"extra_only_lens_given",
       [](A& a) { a.extra = PackedSegment{}, a.extra.lens = a.swa.lens; }, "extra.width: "},
      {"extra_indices_missing", [](A& a) { a.extra.indices = nullptr; }, "extra.indices: "},
      {"extra_pool_missing", [](A& a) { a.extra.pool = PackedPool{}; }, "extra.pool.data: "},
  };
  // The same segment and pool checks for both segments.
  for (const char* segment_name : {"swa", "extra"}) {
    const bool extra = std::string(segment_name) == "extra";
    auto segment = [extra](A& a) -> PackedSegment& { return extra ? a.extra : a.swa; };
    const std::string n = segment_name;
    const std::vector<std::tuple<std::string, std::function<void(PackedSegment&)>>> cases = {
        {".width", [](PackedSegment& s) { s.width = -1; }},
        {".width", [](PackedSegment& s) { s.width = kPackedMaxWidth + 1; }},
        {".indices", [](PackedSegment& s) { s.indices = nullptr; }},
        {".indices", [](PackedSegment& s) { s.indices = s.indices + 1; }},
        {".indices_stride", [](PackedSegment& s) { s.indices_stride = s.width - 4; }},
        {".indices_stride", [](PackedSegment& s) { s.indices_stride = s.width + 2; }},
        {".lens", [](PackedSegment& s) { s.lens = shifted<int32_t>(s.lens, 2); }},
        {".pool.data", [](PackedSegment& s) { s.pool.data = nullptr; }},
        {".pool.data", [](PackedSegment& s) { s.pool.data = s.pool.data + 1; }},
        {".pool.data", [](PackedSegment& s) { s.pool.data = s.pool.data + 8; }},
        {".pool.pages", [](PackedSegment& s) { s.pool.pages = 0; }},
        {".pool.pages", [](PackedSegment& s) { s.pool.pages = -3; }},
        {".pool.page_size", [](PackedSegment& s) { s.pool.page_size = 0; }},
        {".pool.page_stride", [](PackedSegment& s) { s.pool.page_stride = s.pool.page_size * kPackedRowBytes - 16; }},
        {".pool.page_stride", [](PackedSegment& s) { s.pool.page_stride += 8; }},
        // Odd page sizes: page_size * 584 is 8 bytes short of a multiple of 16.
        {".pool.page_stride", [](PackedSegment& s) { s.pool.page_size = 61, s.pool.page_stride = 61 * 584; }},
    };
    for (const auto& [field, breaks] : cases) {
      list.push_back({n + "_" + field.substr(1) + "_" + std::to_string(list.size()),
                      [segment, breaks](A& a) { breaks(segment(a)); }, n + field + ": expected"});
    }
  }
  // The SWA segment is required: absent, its width is refused.
  list.push_back({"swa_absent", [](A& a) { a.swa = PackedSegment{}; }, "swa.width: "});
  for (auto& r : list) std::replace(r.label.begin(), r.label.end(), '.', '_');
  return list;
}

// GoogleTest prints a parameter on failure: the label, not the bytes.
void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.label; }

class Dsv4PackedValidationRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(Dsv4PackedValidationRefusal, RefusedEverywhereNamingTheArgumentAndNothingWritten) {
  const Refusal& r = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  ASSERT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  Dsv4PackedDecodeArgs args = call.args;
  r.breaks(args);

  test::expect_refused_everywhere(
      args, r.label, r.names, [](const Dsv4PackedDecodeArgs& a) { return dsv4_decode_packed(a, nullptr, 0, nullptr); },
      call.outputs);
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, Dsv4PackedValidationRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

TEST(Dsv4PackedValidation, ValidCallPassesAndWritesEverything) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  EXPECT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  EXPECT_TRUE(supports(call.args).ok()) << supports(call.args).message();
  EXPECT_EQ(workspace_size(call.args), 0u);
  const Status status = dsv4_decode_packed(call.args, nullptr, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(call.outputs.fully_written());
}

// The split path's workspace follows kAuto's choice on device memory (the
// split path where it measured fastest: up to 32 units at 3..10 chunks a
// token, up to 64 at 2, up to 48 and from 67 at 11..18, up to one wave of
// 132 at more than 18) and a forced kSplit at any batch; host memory needs
// none.
TEST(Dsv4PackedValidation, WorkspaceSizeFollowsTheChoice) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);  // 16 heads, widths 128 + 256: 6 chunks a token
  Dsv4PackedDecodeArgs a = call.args;
  EXPECT_EQ(workspace_size(a), 0u);
  a.memory = MemorySpace::kDevice;
  ASSERT_TRUE(validate(a).ok()) << validate(a).message();
  for (int64_t tokens : {33, 100}) {
    a.num_tokens = tokens;
    EXPECT_EQ(workspace_size(a), 0u) << tokens << " tokens";
  }
  size_t last = 0;
  for (int64_t tokens : {1, 7, 8, 12, 16, 24, 32}) {
    a.num_tokens = tokens;
    EXPECT_GT(workspace_size(a), last) << tokens << " tokens";
    last = workspace_size(a);
  }
  // {SWA width, extra width, token counts on the split path, token counts off it}.
  struct Widths {
    int32_t swa_width, extra_width;
    std::vector<int64_t> split, other;
  };
  const int32_t swa_width = a.swa.width;
  for (const Widths& w : {Widths{64, 64, {1, 64}, {65}},                 // 2 chunks
                          Widths{swa_width, 128, {1, 32}, {33}},         // 4 chunks
                          Widths{swa_width, 1024, {1, 48, 67, 132}, {49, 66, 133}},  // 18 chunks
                          Widths{swa_width, 2048, {1, 66, 132}, {133}}}) {           // 34 chunks
    a.swa.width = w.swa_width;
    a.extra.width = w.extra_width;
    a.extra.indices_stride = w.extra_width;
    for (const bool on_split : {true, false}) {
      for (int64_t tokens : on_split ? w.split : w.other) {
        a.num_tokens = tokens;
        ASSERT_TRUE(validate(a).ok()) << validate(a).message();
        EXPECT_EQ(workspace_size(a) > 0, on_split)
            << w.swa_width << " + " << w.extra_width << " columns, " << tokens << " tokens";
      }
    }
  }
  a.swa.width = swa_width;
  a.extra.width = 256;
  a.extra.indices_stride = 256;
  a.num_tokens = 1000;
  a.kernel = Dsv4PackedKernel::kSplit;
  EXPECT_GE(workspace_size(a), size_t{1000} * 32 * 1024) << "a forced kSplit: at least the P V values of each unit";
  a.kernel = Dsv4PackedKernel::kCluster;
  EXPECT_EQ(workspace_size(a), 0u);
}

// A forced kSplit whose grids (a CTA a unit's run of chunks, and a combine
// CTA a unit's warp) would pass 2^31 - 1 CTAs is refused naming num_tokens,
// before any device check.
TEST(Dsv4PackedValidation, SplitPathGridLimit) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  Dsv4PackedDecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.kernel = Dsv4PackedKernel::kSplit;
  a.num_tokens = int64_t{1} << 28;  // 16 heads: 2^28 units, 2^31 combine CTAs
  ASSERT_TRUE(validate(a).ok()) << validate(a).message();
  const Status status = supports(a);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported);
  EXPECT_NE(status.message().find("num_tokens"), std::string::npos) << status.message();
}

// With batch_invariant, kAuto and a forced kStream run one CTA a unit at
// every batch: no workspace, where the split path would otherwise take one.
TEST(Dsv4PackedValidation, BatchInvariantNeedsNoWorkspace) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);  // 16 heads, widths 128 + 256
  Dsv4PackedDecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.batch_invariant = true;
  for (Dsv4PackedKernel kernel : {Dsv4PackedKernel::kAuto, Dsv4PackedKernel::kStream}) {
    a.kernel = kernel;
    for (int64_t tokens : {1, 7, 32, 100, 5000}) {
      a.num_tokens = tokens;
      ASSERT_TRUE(validate(a).ok()) << validate(a).message();
      EXPECT_EQ(workspace_size(a), 0u) << tokens << " tokens";
    }
  }
  a.batch_invariant = false;
  a.kernel = Dsv4PackedKernel::kAuto;
  a.num_tokens = 7;
  EXPECT_GT(workspace_size(a), 0u) << "without the flag, 7 tokens take the split path";
}

// The 64-head form serves 64 and 128 heads when forced, without a
// workspace; other head counts are refused naming num_heads, before any
// device check.
TEST(Dsv4PackedValidation, StreamH64HeadCounts) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  Dsv4PackedDecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.kernel = Dsv4PackedKernel::kStreamH64;
  for (int32_t heads : {8, 16, 32}) {
    a.num_heads = heads;
    a.out_token_stride = int64_t{heads} * kHeadDim;
    a.q_token_stride = int64_t{heads} * kHeadDim;
    a.lse_token_stride = heads;
    ASSERT_TRUE(validate(a).ok()) << validate(a).message();
    const Status status = supports(a);
    EXPECT_EQ(status.code(), StatusCode::kNotSupported) << heads << " heads";
    EXPECT_NE(status.message().find("num_heads"), std::string::npos) << status.message();
    EXPECT_EQ(workspace_size(a), 0u);
  }
  a.num_heads = 64;
  a.out_token_stride = a.q_token_stride = 64 * kHeadDim;
  a.lse_token_stride = 64;
  EXPECT_EQ(workspace_size(a), 0u);
  EXPECT_EQ(validate(a).code(), StatusCode::kOk) << validate(a).message();
}

// The 64-head split path, forced: 64 and 128 heads; other head counts are
// refused naming num_heads. Its workspace holds a share of 131,840 bytes (a
// 64-head group's FP32 O, exponents and statistics) for each CTA of each
// (token, 64-head group) unit: as many CTAs a unit as one wave of 132 holds,
// at most one a chunk and 16.
TEST(Dsv4PackedValidation, SplitH64HeadCountsAndWorkspace) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  Dsv4PackedDecodeArgs a = call.args;
  a.memory = MemorySpace::kDevice;
  a.kernel = Dsv4PackedKernel::kSplitH64;
  const auto set_heads = [&a](int32_t heads) {
    a.num_heads = heads;
    a.out_token_stride = a.q_token_stride = int64_t{heads} * kHeadDim;
    a.lse_token_stride = heads;
  };
  for (int32_t heads : {8, 16, 32}) {
    set_heads(heads);
    ASSERT_TRUE(validate(a).ok()) << validate(a).message();
    const Status status = supports(a);
    EXPECT_EQ(status.code(), StatusCode::kNotSupported) << heads << " heads";
    EXPECT_NE(status.message().find("num_heads: kernel kSplitH64 serves 64 or 128 heads"), std::string::npos)
        << status.message();
    EXPECT_EQ(workspace_size(a), 0u) << "a refused head count asks for no workspace";
  }
  constexpr size_t kShare = 131072 + 256 + 512;
  const int32_t chunks = (a.swa.width + 63) / 64 + (a.extra.given() ? (a.extra.width + 63) / 64 : 0);
  ASSERT_GE(chunks, 2) << "the valid call walks several chunks";
  for (int32_t heads : {64, 128})
    for (int64_t tokens : {1, 7, 66, 300}) {
      set_heads(heads);
      a.num_tokens = tokens;
      const int64_t units = tokens * (heads / 64);
      const int64_t fit = std::clamp<int64_t>(132 / units, 1, std::min<int64_t>(chunks, 16));
      const int64_t per_cta = (chunks + fit - 1) / fit, ctas = (chunks + per_cta - 1) / per_cta;
      EXPECT_EQ(workspace_size(a), static_cast<size_t>(units * ctas) * kShare)
          << heads << " heads, " << tokens << " tokens";
    }
  // The combine kernel's grid (32 CTAs a unit) bounds the units: 2^26 at 128 heads is one too many.
  set_heads(128);
  a.num_tokens = int64_t{1} << 25;
  const Status grid = supports(a);
  EXPECT_EQ(grid.code(), StatusCode::kNotSupported);
  EXPECT_NE(grid.message().find("num_tokens: at most 67108863 (token, 64-head group) units"), std::string::npos)
      << grid.message();
  a.memory = MemorySpace::kHost;
  EXPECT_EQ(workspace_size(a), 0u) << "the CPU backend needs no workspace";
}

TEST(Dsv4PackedValidation, ValidEdgeArguments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  auto ok = [](const Dsv4PackedDecodeArgs& a, const char* what) {
    const Status status = validate(a);
    EXPECT_TRUE(status.ok()) << what << ": " << status.message();
  };
  Dsv4PackedDecodeArgs a = call.args;
  a.extra = PackedSegment{};  // SWA only
  ok(a, "no extra segment");
  a = call.args;
  a.swa.lens = nullptr, a.sinks = nullptr, a.lse = nullptr, a.lse_token_stride = 0, a.out_of_range_count = nullptr;
  ok(a, "no optional arrays");
  a = call.args;
  a.swa.pool.page_stride = a.swa.pool.page_size * kPackedRowBytes;  // exactly 64 * 584: a multiple of 16
  ok(a, "page_stride = page_size * 584");
  a = call.args;
  a.swa.pool.page_size = 61, a.swa.pool.page_stride = 61 * 584 + 8;  // odd page size, padded by 8
  ok(a, "page size 61");
  a = call.args;
  a.swa.width = 1, a.extra.width = kPackedMaxWidth, a.extra.indices_stride = kPackedMaxWidth;
  ok(a, "widths 1 and 16384");
  a = call.args;
  a.q_head_stride = 0, a.q_token_stride = 0;  // one q row broadcast: q is only read
  ok(a, "q strides 0");
  a = call.args;
  a.softmax_scale = INFINITY;  // a number; only NaN is refused
  ok(a, "infinite softmax_scale");
}

// T = 0 is Ok for host memory and writes nothing; the checks before the
// T = 0 shortcut (memory, num_tokens, num_heads, widths) still apply.
TEST(Dsv4PackedValidation, ZeroTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  Dsv4PackedDecodeArgs a = call.args;
  a.num_tokens = 0;
  a.q = nullptr, a.out = nullptr, a.swa.indices = nullptr;  // not looked at
  EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  EXPECT_TRUE(supports(a).ok()) << supports(a).message();
  EXPECT_TRUE(dsv4_decode_packed(a, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(call.outputs.untouched());
  Dsv4PackedDecodeArgs bad = a;
  bad.num_heads = 12;
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.swa.width = 0;
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.extra.width = 0;  // extra present (indices set) without a width
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
}

// Device memory is valid; it is served on an sm_90a GPU and refused with a
// reason elsewhere. The call's arrays are host memory here, so nothing may
// launch on them: only supports() and calls that it refuses (or T = 0).
TEST(Dsv4PackedValidation, DeviceMemoryIsServedOrRefusedWithAReason) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidPackedCall call(seed);
  for (int64_t tokens : {4, 0}) {
    Dsv4PackedDecodeArgs a = call.args;
    a.memory = MemorySpace::kDevice;
    a.num_tokens = tokens;
    EXPECT_TRUE(validate(a).ok()) << validate(a).message();
    const Status status = supports(a);
    if (!status.ok()) {
      EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
      EXPECT_EQ(status.message().rfind("dsv4_decode_packed: ", 0), 0u) << status.message();
    }
    if (tokens == 0 || !status.ok()) EXPECT_EQ(dsv4_decode_packed(a, nullptr, 0, nullptr).code(), status.code());
  }
  EXPECT_TRUE(call.outputs.untouched());
}

}  // namespace
}  // namespace sparse_decode
