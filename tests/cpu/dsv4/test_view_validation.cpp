// Validation of the arguments of the DeepSeek-V4 calls that request views,
// long requests, the sink term and host metadata bring (src/dsv4/validate_views.h):
// every refusal names its argument and the expected value, through
// validate(), supports() and the call, for host and device memory, and
// writes nothing; request metadata that the host can read (host memory) is
// refused when inconsistent; what the contract allows passes.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "support/dsv4_checks.h"
#include "support/validation_support.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

// A valid host call of 2 requests of 2 tokens (q_len, seq_lens) with every
// optional output, poisoned.
class ViewCall {
 public:
  explicit ViewCall(uint64_t seed) {
    testing::Dsv4ProblemConfig config = test::small_config(seed, DType::kFloat8E4M3, 16, 256, 4);
    config.q_len = 2;
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

struct Refusal {
  std::string label;
  std::function<void(Dsv4DecodeArgs&)> breaks;
  std::string names;  // the message contains it
};

void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.label; }

const int32_t kCumSeqLensQ[3] = {0, 2, 4};

std::vector<Refusal> refusals() {
  using A = Dsv4DecodeArgs;
  const int64_t row = 16 * kHeadDim;
  return {
      {"sink_term", [](A& a) { a.sink_term = static_cast<SinkTerm>(3); },
       "sink_term: expected kInOutput, kInOutputAndLse or kNone, got 3"},
      {"q_request_stride_negative", [](A& a) { a.q_request_stride = -16; }, "q_request_stride: expected >= 0"},
      {"q_request_stride_unaligned", [](A& a) { a.q_request_stride = 2 * a.q_token_stride + 8; },
       "q_request_stride: expected a multiple of 16 elements"},
      {"indices_request_stride_unaligned", [](A& a) { a.indices_request_stride = 2 * a.indices_stride + 2; },
       "indices_request_stride: expected a multiple of 4 elements"},
      {"lens_request_stride_negative", [](A& a) { a.lens_request_stride = -1; },
       "lens_request_stride: expected >= 0"},
      {"lens_token_stride_negative", [](A& a) { a.lens_token_stride = -1; }, "lens_token_stride: expected >= 0"},
      {"out_request_stride_unaligned", [row](A& a) { a.out_request_stride = 2 * row + 4; },
       "out_request_stride: expected a multiple of 8 elements"},
      // Written requests may not overlap: >= (q_len - 1) * token stride + the row.
      {"out_request_stride_overlap", [row](A& a) { a.out_request_stride = 2 * row - 8; },
       "out_request_stride: expected >= (q_len - 1) * out_token_stride + 8192 = 16384"},
      {"lse_request_stride_overlap", [](A& a) { a.lse_request_stride = 31; },
       "lse_request_stride: expected >= (q_len - 1) * lse_token_stride + 16 = 32"},
      {"request_stride_wraps",
       [](A& a) { a.seq_lens = nullptr, a.num_requests = 4, a.q_len = 1, a.q_request_stride = int64_t{1} << 62; },
       "q_request_stride: expected (num_requests - 1) * q_request_stride to fit in 64-bit offsets"},
      // A request stride needs the uniform request mapping.
      {"views_with_varlen",
       [row](A& a) { a.cum_seq_lens_q = kCumSeqLensQ, a.max_q_len = 2, a.out_request_stride = 3 * row; },
       "cum_seq_lens_q: expected null with a request stride (out_request_stride = 24576)"},
      {"views_without_q_len", [](A& a) { a.seq_lens = nullptr, a.q_len = 0, a.lse_request_stride = 40; },
       "q_len: expected >= 1 with a request stride"},
      {"views_without_requests", [](A& a) { a.seq_lens = nullptr, a.num_requests = 0, a.lse_request_stride = 40; },
       "num_requests: expected >= 1 with a request stride"},
      {"views_tokens_mismatch",
       [](A& a) { a.seq_lens = nullptr, a.num_requests = 3, a.indices_request_stride = 600; },
       "num_tokens: expected num_requests * q_len = 6 with a request stride"},
      {"q_len_mismatch", [](A& a) { a.q_len = 3; }, "num_tokens: expected num_requests * q_len = 6"},
  };
}

class ViewValidationRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(ViewValidationRefusal, RefusedEverywhereNamingTheArgumentAndNothingWritten) {
  const Refusal& r = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ViewCall call(seed);
  ASSERT_TRUE(validate(call.args).ok()) << validate(call.args).message();
  Dsv4DecodeArgs args = call.args;
  r.breaks(args);
  test::expect_refused_everywhere(
      args, r.label, r.names, [](const Dsv4DecodeArgs& a) { return dsv4_decode(a, nullptr, 0, nullptr); },
      call.outputs);
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, ViewValidationRefusal, ::testing::ValuesIn(refusals()),
                         [](const auto& info) { return info.param.label; });

// Host memory: the host reads cum_seq_lens_q, and refuses offsets out of
// order, past num_tokens, or a max_q_len below the longest request, naming
// the argument; device memory does not read them (they pass validate()).
TEST(ViewValidation, HostMetadataIsChecked) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  struct Case {
    std::vector<int32_t> cum;
    int32_t max_q_len;
    std::string names;
  };
  const Case cases[] = {
      {{0, 7, 2}, 7,
       "cum_seq_lens_q: expected non-decreasing offsets in [0, num_tokens = 4], got cum_seq_lens_q[1] = 7"},
      {{0, 3, 2}, 3, "got cum_seq_lens_q[2] = 2 after cum_seq_lens_q[1] = 3"},
      {{-1, 2, 4}, 3, "cum_seq_lens_q: expected offsets in [0, num_tokens = 4], got cum_seq_lens_q[0] = -1"},
      {{0, 1, 4}, 2, "max_q_len: expected >= the longest query length in cum_seq_lens_q = 3, got 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.names);
    ViewCall call(seed);
    Dsv4DecodeArgs a = call.args;
    a.cum_seq_lens_q = c.cum.data();
    a.max_q_len = c.max_q_len;
    const Status statuses[] = {validate(a), supports(a), dsv4_decode(a, nullptr, 0, nullptr)};
    for (const Status& status : statuses) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
      EXPECT_NE(status.message().find(c.names), std::string::npos) << status.message();
    }
    EXPECT_TRUE(call.outputs.untouched());
    a.memory = MemorySpace::kDevice;
    EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  }
  // Offsets that leave tokens to no request (padding) are consistent.
  ViewCall call(seed);
  Dsv4DecodeArgs a = call.args;
  const std::vector<int32_t> padded = {1, 1, 3};
  a.cum_seq_lens_q = padded.data();
  a.max_q_len = 2;
  EXPECT_TRUE(dsv4_decode(a, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(call.outputs.fully_written());
}

// What the contract allows: long requests, request views of every argument,
// lens broadcast over a request, the sink terms.
TEST(ViewValidation, ValidEdgeArguments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  ViewCall call(seed);
  auto ok = [](const Dsv4DecodeArgs& a) {
    const Status status = validate(a);
    EXPECT_TRUE(status.ok()) << status.message();
  };
  Dsv4DecodeArgs a = call.args;
  a.num_requests = 1, a.q_len = 4;  // a request of 4 tokens
  ok(a);
  a.seq_lens = nullptr, a.num_requests = 1, a.q_len = 4;
  a.q_request_stride = 1 << 20, a.indices_request_stride = 1 << 12, a.out_request_stride = 1 << 20;
  ok(a);  // views with one request
  a = call.args;
  a.lens_token_stride = 0, a.lens_request_stride = 1;  // one len a request
  a.q_request_stride = 16;  // q requests interleaved (read only)
  ok(a);
  a = call.args;
  a.cum_seq_lens_q = kCumSeqLensQ, a.max_q_len = 4096;
  ok(a);
  a.lse = nullptr, a.lse_request_stride = 1 << 10;  // the stride of an absent array is not read
  a.lens = nullptr, a.lens_request_stride = 1 << 10;
  ok(a);
  for (SinkTerm term : {SinkTerm::kInOutput, SinkTerm::kInOutputAndLse, SinkTerm::kNone}) {
    a = call.args;
    a.sink_term = term;
    a.sinks = nullptr;  // a sink term without sinks adds nothing
    ok(a);
  }
}

}  // namespace
}  // namespace sparse_decode
