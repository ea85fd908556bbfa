// Argument validation of dsv4_decode_hca and convert_page_aligned_indices
// (src/dsv4_hca/validate.cpp): every refusal, through validate(), supports()
// and the call, names its argument and the expected value and writes
// nothing; valid calls pass; device memory: the GPU path's workspace and limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "support/dsv4_hca_checks.h"
#include "testing/device_buffer.h"
#include "support/validation_support.h"

namespace sparse_decode {
namespace {

template <typename T>
T* shifted(T* pointer, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::conditional_t<std::is_const_v<T>, const char, char>*>(pointer) +
                              bytes);
}

// A valid host-memory call with every optional argument in use (sinks, lse,
// counter) and poisoned outputs.
class ValidCall {
 public:
  explicit ValidCall(uint64_t seed) {
    testing::Dsv4HcaProblemConfig config;
    config.tokens = 4;
    config.q_len = 2;
    config.heads = 16;
    config.page_size = 16;
    config.max_pages = 4;
    config.compressed_pages = 8;
    config.seed = seed;
    problem_ = testing::make_dsv4_hca_problem(config);
    args = problem_.host_args(outputs.out.data(), outputs.lse.data());
    args.out_of_range_count = &outputs.count;
  }

  const testing::Dsv4HcaProblem& problem() const { return problem_; }

  Dsv4HcaDecodeArgs args;
  test::PoisonedOutputs outputs{4, 16};

 private:
  testing::Dsv4HcaProblem problem_;
};

const int32_t kCumSeqLensQ[3] = {0, 2, 4};

struct Refusal {
  std::string label;
  std::function<void(Dsv4HcaDecodeArgs&)> breaks;
  std::string names;  // substring the message must contain
};

void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.label; }

std::vector<Refusal> refusals() {
  using A = Dsv4HcaDecodeArgs;
  std::vector<Refusal> list = {
      {"memory", [](A& a) { a.memory = static_cast<MemorySpace>(5); }, "memory"},
      {"num_tokens_negative", [](A& a) { a.num_tokens = -1; }, "num_tokens"},
      {"num_heads_12", [](A& a) { a.num_heads = 12; }, "num_heads"},
      {"num_heads_256", [](A& a) { a.num_heads = 256; }, "num_heads"},
      {"max_pages_0", [](A& a) { a.max_pages = 0; }, "max_pages"},
      {"q_null", [](A& a) { a.q = nullptr; }, "q: "},
      {"q_unaligned", [](A& a) { a.q = shifted(a.q, 1); }, "q: "},
      {"q_head_stride_520", [](A& a) { a.q_head_stride = 520; }, "q_head_stride"},
      {"q_token_stride_negative", [](A& a) { a.q_token_stride = -a.q_token_stride; }, "q_token_stride"},
      {"q_token_stride_unaligned", [](A& a) { a.q_token_stride += 8; }, "q_token_stride"},
      {"out_null", [](A& a) { a.out = nullptr; }, "out: "},
      {"out_unaligned", [](A& a) { a.out = shifted(a.out, 2); }, "out: "},
      {"out_head_stride_511", [](A& a) { a.out_head_stride = 511; }, "out_head_stride"},
      {"out_head_stride_wraps", [](A& a) { a.out_head_stride = int64_t{1} << 62; }, "out_token_stride"},
      {"compressed_page_size_wraps", [](A& a) { a.compressed_kv.page_size = int64_t{1} << 55; },
       "compressed_kv.page_stride"},
      {"out_token_stride_overlap", [](A& a) { a.out_token_stride = 16 * kHeadDim - 8; }, "out_token_stride"},
      {"swa_kv_data_null", [](A& a) { a.swa_kv.data = nullptr; }, "swa_kv.data"},
      {"swa_kv_data_unaligned", [](A& a) { a.swa_kv.data = shifted(a.swa_kv.data, 1); }, "swa_kv.data"},
      {"swa_kv_pages_0", [](A& a) { a.swa_kv.pages = 0; }, "swa_kv.pages"},
      {"swa_kv_page_size_0", [](A& a) { a.swa_kv.page_size = 0; }, "swa_kv.page_size"},
      {"swa_kv_row_stride_256", [](A& a) { a.swa_kv.row_stride = 256; }, "swa_kv.row_stride"},
      {"swa_kv_row_stride_520", [](A& a) { a.swa_kv.row_stride = 520; }, "swa_kv.row_stride"},
      {"swa_kv_page_stride_short", [](A& a) { a.swa_kv.page_stride -= 16; }, "swa_kv.page_stride"},
      {"swa_kv_page_stride_unaligned", [](A& a) { a.swa_kv.page_stride += 8; }, "swa_kv.page_stride"},
      {"compressed_kv_data_null", [](A& a) { a.compressed_kv.data = nullptr; }, "compressed_kv.data"},
      {"compressed_kv_pages_negative", [](A& a) { a.compressed_kv.pages = -2; }, "compressed_kv.pages"},
      {"compressed_kv_page_size_0", [](A& a) { a.compressed_kv.page_size = 0; }, "compressed_kv.page_size"},
      {"compressed_kv_page_stride_short", [](A& a) { a.compressed_kv.page_stride = 512; },
       "compressed_kv.page_stride"},
      {"swa_rows_null", [](A& a) { a.swa_rows = nullptr; }, "swa_rows: "},
      {"swa_rows_unaligned", [](A& a) { a.swa_rows += 1; }, "swa_rows: "},
      {"swa_rows_stride_short", [](A& a) { a.swa_rows_stride = 124; }, "swa_rows_stride"},
      {"swa_rows_stride_not_multiple_of_4", [](A& a) { a.swa_rows_stride = 130; }, "swa_rows_stride"},
      {"swa_lens_null", [](A& a) { a.swa_lens = nullptr; }, "swa_lens: "},
      {"swa_lens_unaligned", [](A& a) { a.swa_lens = shifted(a.swa_lens, 2); }, "swa_lens: "},
      {"block_table_null", [](A& a) { a.block_table = nullptr; }, "block_table: "},
      {"block_table_unaligned", [](A& a) { a.block_table = shifted(a.block_table, 1); }, "block_table: "},
      {"block_table_stride_short", [](A& a) { a.block_table_stride = a.max_pages - 1; }, "block_table_stride"},
      {"lens_null", [](A& a) { a.lens = nullptr; }, "lens: "},
      {"lens_unaligned", [](A& a) { a.lens = shifted(a.lens, 2); }, "lens: "},
      {"hca_seq_lens_null", [](A& a) { a.hca_seq_lens = nullptr; }, "hca_seq_lens: "},
      {"hca_seq_lens_unaligned", [](A& a) { a.hca_seq_lens = shifted(a.hca_seq_lens, 2); }, "hca_seq_lens: "},
      {"num_requests_0", [](A& a) { a.num_requests = 0; }, "num_requests"},
      {"q_len_0", [](A& a) { a.q_len = 0; }, "q_len"},
      {"q_len_past_num_tokens", [](A& a) { a.q_len = 17; }, "num_tokens: expected num_requests * q_len"},
      {"num_tokens_not_requests_times_q_len", [](A& a) { a.num_requests = 3; }, "num_tokens"},
      {"cum_seq_lens_q_unaligned", [](A& a) { a.cum_seq_lens_q = shifted(kCumSeqLensQ, 2), a.max_q_len = 2; },
       "cum_seq_lens_q"},
      {"max_q_len_0", [](A& a) { a.cum_seq_lens_q = kCumSeqLensQ, a.max_q_len = 0; }, "max_q_len"},
      {"num_tokens_over_requests_times_max_q_len", [](A& a) { a.cum_seq_lens_q = kCumSeqLensQ, a.max_q_len = 1; },
       "num_tokens"},
      {"sinks_unaligned", [](A& a) { a.sinks = shifted(a.sinks, 1); }, "sinks: "},
      {"lse_unaligned", [](A& a) { a.lse = shifted(a.lse, 2); }, "lse: "},
      {"lse_token_stride", [](A& a) { a.lse_token_stride = a.num_heads - 1; }, "lse_token_stride"},
      {"counter_unaligned", [](A& a) { a.out_of_range_count = shifted(a.out_of_range_count, 2); },
       "out_of_range_count"},
      {"bmm1_scale_nan", [](A& a) { a.bmm1_scale = NAN; }, "bmm1_scale"},
      {"bmm2_scale_nan", [](A& a) { a.bmm2_scale = NAN; }, "bmm2_scale"},
  };
  return list;
}

class Dsv4HcaValidationRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(Dsv4HcaValidationRefusal, RefusedEverywhereNamingTheArgumentAndNothingWritten) {
  const Refusal& r = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  ASSERT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  Dsv4HcaDecodeArgs args = call.args;
  r.breaks(args);
  test::expect_refused_everywhere(
      args, r.label, r.names, [](const Dsv4HcaDecodeArgs& a) { return dsv4_decode_hca(a, nullptr, 0, nullptr); },
      call.outputs);
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, Dsv4HcaValidationRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

TEST(Dsv4HcaValidation, ValidCallWritesEverything) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  EXPECT_TRUE(supports(call.args).ok()) << supports(call.args).message();
  EXPECT_EQ(workspace_size(call.args), 0u);
  const Status status = dsv4_decode_hca(call.args, nullptr, 0, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(call.outputs.fully_written());
}

TEST(Dsv4HcaValidation, ValidEdgeArguments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  auto ok = [](const Dsv4HcaDecodeArgs& a) {
    const Status status = validate(a);
    EXPECT_TRUE(status.ok()) << status.message();
  };
  Dsv4HcaDecodeArgs a = call.args;
  a.cum_seq_lens_q = kCumSeqLensQ;  // varlen, T <= B * max_q_len
  a.max_q_len = 16;
  ok(a);
  a = call.args;
  a.sinks = nullptr, a.lse = nullptr, a.lse_token_stride = 0, a.out_of_range_count = nullptr;
  ok(a);
  a = call.args;
  a.block_table_stride = a.max_pages + 1;  // any stride >= max_pages: no multiple of 4 needed
  a.q_head_stride = 0, a.q_token_stride = 0;  // one q row for every token and head
  a.bmm1_scale = INFINITY;
  ok(a);
}

// T = 0 is Ok and writes nothing; the checks before the shortcut still apply.
TEST(Dsv4HcaValidation, ZeroTokens) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ValidCall call(seed);
  Dsv4HcaDecodeArgs a = call.args;
  a.num_tokens = 0;
  a.q = nullptr;  // not looked at
  EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  EXPECT_TRUE(dsv4_decode_hca(a, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(call.outputs.untouched());
  a.max_pages = 0;
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
}

// Device memory runs the GPU path (docs/formats/hca_layout.md). These checks
// hold with or without a device, and launch nothing: the pointers are host
// ones.

// A valid call on "device memory" (host pointers: nothing here may launch).
class Dsv4HcaWorkspace : public ::testing::Test {
 protected:
  Dsv4HcaWorkspace() : seed_(test::fresh_seed()), call_(seed_), a(call_.args) { a.memory = MemorySpace::kDevice; }

  // Section 1's workspace_size on the same rows, the expansion [T, W'] (the
  // split scratch: 0 without a device): the page walk needs nothing more.
  size_t expected_workspace(int32_t width) const {
    const testing::Dsv4HcaExpansion expansion = testing::expand_to_section1(call_.problem());
    Dsv4DecodeArgs s = expansion.args(call_.problem(), a.out, a.lse);
    s.memory = MemorySpace::kDevice;
    s.compressed_kv = a.compressed_kv;
    s.width = width;
    s.indices_stride = width;  // validate() does not read the table
    return workspace_size(s);
  }

  uint64_t seed_;
  ValidCall call_;
  Dsv4HcaDecodeArgs a;
};

TEST_F(Dsv4HcaWorkspace, Section1WorkspaceOnTheSameRows) {
  SCOPED_TRACE(test::seed_message(seed_));
  EXPECT_EQ(workspace_size(call_.args), 0u) << "host memory";
  // 4 tokens, 4 pages of 16: W' = 192.
  EXPECT_EQ(workspace_size(a), expected_workspace(192));
  // 4 pages of 15: 128 + 60 = 188 (a multiple of 4); 3 pages of 15: 173 -> 176.
  a.compressed_kv.page_size = 15;
  a.compressed_kv.pages = 8;
  EXPECT_EQ(workspace_size(a), expected_workspace(188));
  a.max_pages = 3;
  EXPECT_EQ(workspace_size(a), expected_workspace(176));
  // The widest table section 1 takes: 128 + 16384.
  a.max_pages = 1;
  a.compressed_kv.page_size = 16384;
  a.compressed_kv.page_stride = 16384 * 512;
  a.compressed_kv.pages = 1;
  EXPECT_EQ(workspace_size(a), expected_workspace(128 + 16384));
  // 0 where nothing runs on the device: T = 0, invalid, too wide.
  Dsv4HcaDecodeArgs empty = a;
  empty.num_tokens = 0;
  EXPECT_EQ(workspace_size(empty), 0u);
  Dsv4HcaDecodeArgs invalid = a;
  invalid.lens = nullptr;
  EXPECT_EQ(workspace_size(invalid), 0u);
  a.max_pages = 2;
  EXPECT_EQ(workspace_size(a), 0u);
}

// More than 128 + 16384 expanded columns: NotSupported naming max_pages, at
// any T, before anything else of the device path.
TEST_F(Dsv4HcaWorkspace, WidthPastSection1IsNotSupported) {
  SCOPED_TRACE(test::seed_message(seed_));
  a.compressed_kv.page_size = 16;
  a.max_pages = 16384 / 16 + 1;
  a.block_table_stride = a.max_pages;
  a.compressed_kv.pages = a.max_pages;
  a.compressed_kv.page_stride = 16 * 512;
  for (int64_t tokens : {int64_t{4}, int64_t{0}}) {
    a.num_tokens = tokens;
    EXPECT_TRUE(validate(a).ok()) << validate(a).message();
    for (const Status& status : {supports(a), dsv4_decode_hca(a, nullptr, 0, nullptr)}) {
      EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
      EXPECT_NE(status.message().find("max_pages"), std::string::npos) << status.message();
      EXPECT_NE(status.message().find("16400"), std::string::npos) << status.message();
    }
  }
  a.max_pages = 16384 / 16;  // the limit itself: not refused for its width
  a.num_tokens = 4;
  EXPECT_EQ(supports(a).message().find("max_pages"), std::string::npos) << supports(a).message();
  EXPECT_TRUE(call_.outputs.untouched());
}

// A compressed pool of more than INT32_MAX rows cannot be named by section
// 1's int32 indices: NotSupported naming compressed_kv.
TEST_F(Dsv4HcaWorkspace, PoolPastInt32RowsIsNotSupported) {
  SCOPED_TRACE(test::seed_message(seed_));
  a.compressed_kv.pages = (int64_t{1} << 31) / a.compressed_kv.page_size + 1;
  ASSERT_TRUE(validate(a).ok()) << validate(a).message();
  for (const Status& status : {supports(a), dsv4_decode_hca(a, nullptr, 0, nullptr)}) {
    EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
    EXPECT_NE(status.message().find("compressed_kv"), std::string::npos) << status.message();
  }
  EXPECT_EQ(workspace_size(a), 0u);
  EXPECT_TRUE(call_.outputs.untouched());
}

// The workspace is optional, as section 1's: without a device a valid device
// call with no workspace is refused by the device check (NotSupported, not
// the workspace) and writes nothing. With a device the call would launch on
// these host pointers: the GPU suite runs it (Dsv4HcaGpu.AnyWorkspaceGivesTheSameBits).
TEST_F(Dsv4HcaWorkspace, NoWorkspaceIsNotRefused) {
  SCOPED_TRACE(test::seed_message(seed_));
  std::string why;
  if (!testing::cuda_device_available(&why)) {
    const Status status = dsv4_decode_hca(a, nullptr, 0, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
    EXPECT_EQ(status.message().find("workspace"), std::string::npos) << status.message();
    EXPECT_TRUE(call_.outputs.untouched());
  }
  // T = 0 needs none.
  a.num_tokens = 0;
  EXPECT_EQ(workspace_size(a), 0u);
  EXPECT_TRUE(supports(a).ok()) << supports(a).message();
  EXPECT_TRUE(dsv4_decode_hca(a, nullptr, 0, nullptr).ok());
}

// Without a device, a valid device call is refused by the device check
// (after validation); with one, supports() accepts it.
TEST_F(Dsv4HcaWorkspace, DeviceMemoryIsServedWhereThereIsADevice) {
  SCOPED_TRACE(test::seed_message(seed_));
  std::string why;
  const Status status = supports(a);
  if (testing::cuda_device_available(&why)) {
    EXPECT_TRUE(status.ok()) << status.message();
  } else {
    EXPECT_EQ(status.code(), StatusCode::kNotSupported) << status.message();
  }
}

}  // namespace
}  // namespace sparse_decode
