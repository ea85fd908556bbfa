// Argument validation of merge_states (src/merge/validate.cpp): every
// refusal, through validate(), supports() and merge_states(), for host and
// device memory, names its argument and the expected value and writes
// nothing; valid layouts pass; device memory without a CUDA device is
// NotSupported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sparse_decode/merge_states.h"
#include "support/merge_checks.h"
#include "support/test_support.h"
#include "testing/device_buffer.h"

namespace sparse_decode {
namespace {

// A valid host call over a small case (R = 3, T = 4, H = 4) with poisoned outputs.
class ValidMerge {
 public:
  explicit ValidMerge(bool stacked = false) {
    test::MergeCaseConfig c;
    c.ranks = 3;
    c.tokens = 4;
    c.heads = 4;
    c.stacked = stacked;
    c.seed = test::fresh_seed();
    case_ = test::make_merge_case(c);
    out_.assign(static_cast<size_t>(case_.out_elements()), test::kOutPoison);
    lse_.assign(static_cast<size_t>(c.tokens * c.heads), std::nanf(""));
    args = case_.host_args(out_.data(), lse_.data());
  }
  bool untouched() const {
    for (uint16_t v : out_) {
      if (v != test::kOutPoison) return false;
    }
    for (float v : lse_) {
      if (!std::isnan(v)) return false;
    }
    return true;
  }
  bool fully_written() const {
    for (uint16_t v : out_) {
      if (v == test::kOutPoison) return false;
    }
    return true;
  }

  MergeStatesArgs args;

 private:
  test::MergeCase case_;
  std::vector<uint16_t> out_;
  std::vector<float> lse_;
};

struct Refusal {
  const char* label;  // the argument broken
  const char* names;  // what the message must contain
  std::function<void(MergeStatesArgs&)> edit;
  bool stacked = false;
};

const void* shifted(const void* pointer, int bytes) { return static_cast<const char*>(pointer) + bytes; }

TEST(MergeValidation, EveryRefusalNamesItsArgumentAndWritesNothing) {
  static const float* null_lse[3] = {nullptr, nullptr, nullptr};
  const std::vector<Refusal> refusals = {
      {"memory", "memory", [](auto& a) { a.memory = static_cast<MemorySpace>(7); }},
      {"no ranks", "num_ranks", [](auto& a) { a.num_ranks = 0; }},
      {"too many ranks", "num_ranks", [](auto& a) { a.num_ranks = kMergeMaxRanks + 1; }},
      {"tokens", "num_tokens", [](auto& a) { a.num_tokens = -1; }},
      {"heads", "num_heads", [](auto& a) { a.num_heads = 0; }},
      {"head_dim 0", "head_dim", [](auto& a) { a.head_dim = 0; }},
      {"head_dim 12", "head_dim", [](auto& a) { a.head_dim = 12; }},
      {"partial dtype", "partial_dtype", [](auto& a) { a.partial_dtype = static_cast<MergeDType>(5); }},
      {"out dtype", "out_dtype", [](auto& a) { a.out_dtype = static_cast<MergeDType>(5); }},
      {"partials and base", "partials", [](auto& a) { a.partial_base = a.partials[0]; }},
      {"no partials", "partials", [](auto& a) { a.partials = nullptr; }},
      {"a null partial", "partials[1]",
       [](auto& a) {
         static const void* list[3];
         list[0] = a.partials[0], list[1] = nullptr, list[2] = a.partials[2];
         a.partials = list;
       }},
      {"a misaligned partial", "partials[2]",
       [](auto& a) {
         static const void* list[3];
         list[0] = a.partials[0], list[1] = a.partials[1], list[2] = shifted(a.partials[2], 2);
         a.partials = list;
       }},
      {"misaligned base", "partial_base", [](auto& a) { a.partial_base = shifted(a.partial_base, 8); }, true},
      {"rank stride", "partial_rank_stride", [](auto& a) { a.partial_rank_stride += 4; }, true},
      {"negative rank stride", "partial_rank_stride", [](auto& a) { a.partial_rank_stride = -8; }, true},
      {"token stride", "partial_token_stride", [](auto& a) { a.partial_token_stride += 2; }},
      {"head stride", "partial_head_stride", [](auto& a) { a.partial_head_stride = -8; }},
      {"lses and base", "lses", [](auto& a) { a.lse_base = a.lses[0]; }},
      {"no lses", "lses", [](auto& a) { a.lses = nullptr; }},
      {"a null lse", "lses[0]", [](auto& a) { a.lses = null_lse; }},
      {"a misaligned lse", "lses[1]",
       [](auto& a) {
         static const float* list[3];
         list[0] = a.lses[0], list[1] = static_cast<const float*>(shifted(a.lses[1], 2)), list[2] = a.lses[2];
         a.lses = list;
       }},
      {"misaligned lse base", "lse_base",
       [](auto& a) { a.lse_base = static_cast<const float*>(shifted(a.lse_base, 1)); }, true},
      {"lse rank stride", "lse_rank_stride", [](auto& a) { a.lse_rank_stride = -1; }, true},
      {"lse token stride", "lse_token_stride", [](auto& a) { a.lse_token_stride = -4; }},
      {"lse head stride", "lse_head_stride", [](auto& a) { a.lse_head_stride = -1; }},
      {"null out", "out", [](auto& a) { a.out = nullptr; }},
      {"misaligned out", "out", [](auto& a) { a.out = const_cast<void*>(shifted(a.out, 4)); }},
      {"out head stride", "out_head_stride", [](auto& a) { a.out_head_stride = a.head_dim - 8; }},
      {"out token stride", "out_token_stride", [](auto& a) { a.out_token_stride -= 8; }},
      {"out stride bytes", "out_token_stride", [](auto& a) { a.out_token_stride += 4; }},
      {"misaligned out_lse", "out_lse",
       [](auto& a) { a.out_lse = const_cast<float*>(static_cast<const float*>(shifted(a.out_lse, 2))); }},
      {"out_lse token stride", "out_lse_token_stride", [](auto& a) { a.out_lse_token_stride = a.num_heads - 1; }},
      {"out_lse head stride", "out_lse_head_stride", [](auto& a) { a.out_lse_head_stride = 0; }},
      {"out over a partial", "out", [](auto& a) { a.out = const_cast<void*>(a.partials[1]); }},
      {"out over the stacked partials", "out", [](auto& a) { a.out = const_cast<void*>(a.partial_base); }, true},
      {"out_lse over an lse", "out_lse", [](auto& a) { a.out_lse = const_cast<float*>(a.lses[2]); }},
      {"out_lse over out", "out_lse", [](auto& a) { a.out_lse = static_cast<float*>(a.out); }},
  };
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(refusal.label);
    ValidMerge call(refusal.stacked);
    refusal.edit(call.args);
    for (MemorySpace memory : {MemorySpace::kHost, MemorySpace::kDevice}) {
      if (std::string(refusal.label) != "memory") call.args.memory = memory;
      const Status statuses[] = {validate(call.args), supports(call.args), merge_states(call.args, nullptr)};
      for (const Status& status : statuses) {
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
        EXPECT_NE(status.message().find(refusal.names), std::string::npos) << "message: " << status.message();
        EXPECT_NE(status.message().find("expected"), std::string::npos) << "message: " << status.message();
      }
    }
    EXPECT_TRUE(call.untouched()) << "a refused call wrote to out or out_lse";
  }
}

TEST(MergeValidation, ValidLayoutsPass) {
  const std::vector<std::pair<const char*, std::function<void(MergeStatesArgs&)>>> layouts = {
      {"as built", [](auto&) {}},
      {"broadcast partial head (stride 0)", [](auto& a) { a.partial_head_stride = 0; }},
      {"[H, T] lse", [](auto& a) { a.lse_head_stride = a.num_tokens, a.lse_token_stride = 1; }},
      {"[H, T] out_lse", [](auto& a) { a.out_lse_head_stride = a.num_tokens, a.out_lse_token_stride = 1; }},
      {"no out_lse", [](auto& a) { a.out_lse = nullptr, a.out_lse_token_stride = 0; }},
      {"one token, any out token stride", [](auto& a) { a.num_tokens = 1, a.out_token_stride = 0; }},
  };
  for (const auto& [label, edit] : layouts) {
    SCOPED_TRACE(label);
    ValidMerge call;
    edit(call.args);
    EXPECT_TRUE(validate(call.args).ok()) << validate(call.args).message();
    const Status status = merge_states(call.args, nullptr);
    EXPECT_TRUE(status.ok()) << status.message();
  }
  ValidMerge head_major;  // out as [H, T, D]: head stride T * D, token stride D
  head_major.args.out_head_stride = head_major.args.num_tokens * head_major.args.head_dim;
  head_major.args.out_token_stride = head_major.args.head_dim;
  EXPECT_TRUE(merge_states(head_major.args, nullptr).ok());
  EXPECT_TRUE(head_major.fully_written());
  ValidMerge stacked(true);
  EXPECT_TRUE(merge_states(stacked.args, nullptr).ok());
  EXPECT_TRUE(stacked.fully_written());
}

TEST(MergeValidation, DeviceMemoryWithoutADeviceIsNotSupported) {
  std::string why;
  if (testing::cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  ValidMerge call;
  call.args.memory = MemorySpace::kDevice;
  EXPECT_TRUE(validate(call.args).ok());
  const Status status = merge_states(call.args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
  EXPECT_NE(status.message().find("merge_states"), std::string::npos) << status.message();
  EXPECT_TRUE(call.untouched());
}

}  // namespace
}  // namespace sparse_decode
