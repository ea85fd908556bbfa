// The sink term of the DeepSeek-V4 calls (types.h SinkTerm; docs/spec.md,
// sections 1 and 5) on the CPU backend: kNone is the call without sinks,
// kInOutputAndLse keeps kInOutput's out and counts the sink in lse (the sink
// alone for a token without an active column), and partial results of ranks
// that split a token's rows, the sink on one rank, merge into the single call
// (out = sum_r exp(lse_r - L) out_r, L = log sum_r exp(lse_r)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/dsv4_hca_reference.h"
#include "reference/dsv4_packed_reference.h"
#include "reference/dsv4_reference.h"
#include "support/dsv4_checks.h"
#include "support/dsv4_hca_checks.h"
#include "support/dsv4_packed_checks.h"
#include "testing/dsv4_hca_problem.h"
#include "testing/dsv4_packed_problem.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(lse) + exp(sink)), written plainly (the test's values are moderate).
double naive_lse_with_sink(double lse, double sink) {
  if (std::isinf(sink)) return sink > 0 ? kInf : lse;
  return std::log(std::exp(lse) + std::exp(sink));
}

// One call's three sink terms against each other and the formula: kNone is
// the call without sinks (bitwise), kInOutputAndLse has kInOutput's out
// (bitwise) and lse with the sink.
template <typename Args, typename Run>
void check_sink_terms(Args args, Run run, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_NE(args.sinks, nullptr);
  const float* sinks = args.sinks;
  const test::HostOutput in_output = run(args);
  args.sink_term = SinkTerm::kNone;
  const test::HostOutput none = run(args);
  args.sink_term = SinkTerm::kInOutput;
  args.sinks = nullptr;
  const test::HostOutput without = run(args);
  args.sinks = sinks;
  args.sink_term = SinkTerm::kInOutputAndLse;
  const test::HostOutput with_lse = run(args);

  EXPECT_TRUE(none.out == without.out) << "kNone differs from the call without sinks";
  EXPECT_EQ(std::memcmp(none.lse.data(), without.lse.data(), none.lse.size() * 4), 0);
  EXPECT_TRUE(with_lse.out == in_output.out) << "kInOutputAndLse changed out";
  EXPECT_FALSE(in_output.out == without.out) << "the sinks changed nothing: the test proves little";
  const int H = args.num_heads;
  int64_t empty = 0;
  for (size_t i = 0; i < with_lse.lse.size(); ++i) {
    const double plain = in_output.lse[i], sink = sinks[i % H];
    EXPECT_EQ(in_output.lse[i], without.lse[i]) << "kInOutput's lse counts the sink";
    const double want = std::isinf(plain) ? sink : naive_lse_with_sink(plain, sink);
    EXPECT_NEAR(with_lse.lse[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << "lse[" << i << "]";
    empty += std::isinf(plain);
  }
  EXPECT_GT(empty, 0) << "no token without an active column: the empty case is not covered";
}

// dsv4_decode: tokens 1 and 4 lose every column (their lse is the sink's).
TEST(SinkTerm, Dsv4) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    testing::Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed, dtype, 16, 384, 6));
    for (int64_t t : {1, 4}) std::fill_n(&p.indices[t * p.config.width], p.config.width, -1);
    check_sink_terms(p.host_args(nullptr, nullptr), [](const Dsv4DecodeArgs& a) { return test::run_host(a); },
                     test::dtype_name(dtype));
  }
}

TEST(SinkTerm, Packed) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  testing::Dsv4PackedProblemConfig c;
  c.seed = seed, c.tokens = 5, c.q_len = 5, c.extra_width = 256, c.extra_rows = 1024;
  testing::Dsv4PackedProblem p = testing::make_dsv4_packed_problem(c);
  p.swa_lens[2] = 0, p.extra_lens[2] = 0;  // token 2 has no active column
  check_sink_terms(
      p.host_args(nullptr, nullptr), [](const Dsv4PackedDecodeArgs& a) { return test::run_packed_host(a); }, "packed");
}

TEST(SinkTerm, Hca) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  testing::Dsv4HcaProblemConfig c;
  c.seed = seed, c.tokens = 6, c.q_len = 3;
  testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  p.swa_lens[4] = 0, p.lens[4] = 0;  // token 4 has no active row
  check_sink_terms(p.host_args(nullptr, nullptr), [](const Dsv4HcaDecodeArgs& a) { return test::run_hca_host(a); },
                   "hca");
}

// Sinks of +inf and -inf with kInOutputAndLse: lse +inf (out 0), and the
// plain lse.
TEST(SinkTerm, InfiniteSinks) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  testing::Dsv4Problem p = testing::make_dsv4_problem(test::small_config(seed, DType::kFloat8E4M3, 16, 256, 3));
  for (int h = 0; h < 16; ++h) p.sinks[h] = h % 2 ? kInf : -kInf;
  Dsv4DecodeArgs a = p.host_args(nullptr, nullptr);
  const test::HostOutput plain = test::run_host(a);
  a.sink_term = SinkTerm::kInOutputAndLse;
  const test::HostOutput got = test::run_host(a);
  for (int64_t t = 0; t < 3; ++t)
    for (int h = 0; h < 16; ++h) {
      const size_t i = t * 16 + h;
      if (h % 2) {
        EXPECT_EQ(got.lse[i], INFINITY);
        for (int d = 0; d < kHeadDim; ++d) ASSERT_EQ(got.out[i * kHeadDim + d] & 0x7FFF, 0);
      } else {
        EXPECT_EQ(got.lse[i], plain.lse[i]);
      }
    }
}

// A test-side merge_states in double: L = log sum_r exp(lse_r), out = sum_r
// exp(lse_r - L) out_r, zeros and -inf where every rank is empty.
reference::Dsv4Result merge(const std::vector<reference::Dsv4Result>& ranks, int heads) {
  reference::Dsv4Result merged;
  merged.out.assign(ranks[0].out.size(), 0.0);
  merged.lse.assign(ranks[0].lse.size(), -kInf);
  for (size_t row = 0; row < merged.lse.size(); ++row) {
    double most = -kInf;
    for (const auto& r : ranks) most = std::max(most, r.lse[row]);
    if (most == -kInf) continue;
    double sum = 0.0;
    for (const auto& r : ranks) sum += std::exp(r.lse[row] - most);
    const double L = most + std::log(sum);
    merged.lse[row] = L;
    for (const auto& r : ranks) {
      const double weight = std::exp(r.lse[row] - L);
      for (int d = 0; d < kHeadDim; ++d) merged.out[row * kHeadDim + d] += weight * r.out[row * kHeadDim + d];
    }
  }
  (void)heads;
  return merged;
}

// `ranks` partial calls of one problem: rank r keeps the columns that
// `rank_of(t, c)` gives it (the others -1), the sink counted by rank 0 only.
// Their merge is the single call (fp64, 1e-12), lse included (with the sink).
TEST(SinkTerm, PartialsMergeIntoTheSingleCall) {
  for (DType dtype : {DType::kFloat8E4M3, DType::kBFloat16}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed));
    testing::Dsv4ProblemConfig config = test::small_config(seed, dtype, 16, 640, 6);
    config.q_len = 3;
    const testing::Dsv4Problem p = testing::make_dsv4_problem(config);
    const std::vector<int32_t> seq_lens = {70, 400};
    Dsv4DecodeArgs single = p.host_args(nullptr, nullptr);
    single.seq_lens = seq_lens.data(), single.num_requests = 2, single.q_len = 3;
    single.sink_term = SinkTerm::kInOutputAndLse;
    const reference::Dsv4Result want = reference::dsv4_decode(single);

    constexpr int kRanks = 3;
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<int32_t> owner(p.indices.size());
    for (auto& o : owner) o = static_cast<int32_t>(rng() % kRanks);
    // Token 0: everything on rank 2 (ranks 0 and 1, the sink's, have none);
    // token 5: everything on rank 0.
    std::fill_n(owner.begin(), config.width, 2);
    std::fill_n(owner.begin() + 5 * config.width, config.width, 0);
    std::vector<std::vector<int32_t>> indices(kRanks, p.indices);
    std::vector<reference::Dsv4Result> partial;
    for (int r = 0; r < kRanks; ++r) {
      for (size_t i = 0; i < owner.size(); ++i) {
        if (owner[i] != r) indices[r][i] = -1;
      }
      Dsv4DecodeArgs a = single;
      a.indices = indices[r].data();
      a.sink_term = r == 0 ? SinkTerm::kInOutputAndLse : SinkTerm::kNone;
      partial.push_back(reference::dsv4_decode(a));
    }
    const reference::Dsv4Result merged = merge(partial, config.heads);
    test::expect_rows_close(merged.out, want.out, config.tokens, config.heads, 1e-12, "merged out vs single call");
    test::expect_lse_close(merged.lse, want.lse, 1e-12, "merged lse vs single call");
    // Without the sink on rank 0 the merge misses it: the test can fail.
    Dsv4DecodeArgs sinkless = single;
    sinkless.indices = indices[0].data();
    sinkless.sink_term = SinkTerm::kInOutput;
    std::vector<reference::Dsv4Result> wrong = partial;
    wrong[0] = reference::dsv4_decode(sinkless);
    const reference::Dsv4Result bad = merge(wrong, config.heads);
    double difference = 0.0;
    for (size_t i = 0; i < bad.lse.size(); ++i) {
      if (std::isfinite(want.lse[i])) difference = std::max(difference, std::fabs(bad.lse[i] - want.lse[i]));
    }
    EXPECT_GT(difference, 1e-3) << "lse without the sink merges to the same: the test proves little";
  }
}

}  // namespace
}  // namespace sparse_decode
