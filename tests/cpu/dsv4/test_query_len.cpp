// Any number of query tokens a request (docs/spec.md, section 1: 1 up to at
// least 4096) on the CPU backend: uniform q_len of 17, 128, 257 and 4096 and
// varlen requests up to 257 tokens, each token's sliding window from its own
// position, against the literal softmax (dsv4_checks.h: brute_force) or, for
// 4096 tokens, against the same call with the window applied to the indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/dsv4_reference.h"
#include "support/dsv4_checks.h"
#include "support/dsv4_hca_checks.h"
#include "testing/dsv4_hca_problem.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode {
namespace {

// Columns that only the seq_lens window masks (inside lens, index >= 0):
// positive when the test reaches tokens whose window is short.
int64_t window_cut_columns(const Dsv4DecodeArgs& a) {
  int64_t cut = 0;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t window = std::clamp<int64_t>(test::brute_position(a, t) + 1, 0, kSwaColumns);
    for (int64_t c = window; c < kSwaColumns; ++c) {
      cut += a.indices[t * a.indices_stride + c] >= 0 && (!a.lens || c < a.lens[t]);
    }
  }
  return cut;
}

// `requests` requests of q_len tokens; request b has seq_len q_len + extra[b]
// (a negative extra puts its first tokens before position 0: no window).
void check_uniform(int32_t q_len, const std::vector<int32_t>& extra, int heads, int width) {
  const uint64_t seed = test::fresh_seed();
  const int32_t requests = static_cast<int32_t>(extra.size());
  SCOPED_TRACE("q_len " + std::to_string(q_len) + ", " + test::seed_message(seed));
  testing::Dsv4ProblemConfig config = test::small_config(seed, DType::kFloat8E4M3, heads, width,
                                                         int64_t{requests} * q_len);
  config.q_len = q_len;
  const testing::Dsv4Problem p = testing::make_dsv4_problem(config);
  std::vector<int32_t> seq_lens;
  for (int32_t e : extra) seq_lens.push_back(q_len + e);
  Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  args.seq_lens = seq_lens.data();
  args.num_requests = requests;
  args.q_len = q_len;
  EXPECT_GT(window_cut_columns(args), 0) << "no window cuts a column: the positions are not tested";
  test::check_problem(args);
}

TEST(Dsv4QueryLen, UniformBeyondSixteen) {
  check_uniform(17, {3, 200, -5}, 16, 384);
  check_uniform(128, {0, 60}, 8, 128);
  check_uniform(257, {-20}, 8, 128);
}

// 4096 tokens of one request: every token's columns are active exactly
// inside its window (the reference's column rule, all 128 columns), and the
// host call matches the reference (24 columns a token keep it quick).
TEST(Dsv4QueryLen, Uniform4096) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  constexpr int32_t kQueryLen = 4096;
  testing::Dsv4ProblemConfig config = test::small_config(seed, DType::kFloat8E4M3, 8, 128, kQueryLen);
  config.q_len = kQueryLen;
  config.swa_rows = 8192;
  testing::Dsv4Problem p = testing::make_dsv4_problem(config);
  const std::vector<int32_t> seq_lens = {kQueryLen - 60};  // tokens 0..59 before position 0
  Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  args.seq_lens = seq_lens.data();
  args.num_requests = 1;
  args.q_len = kQueryLen;
  args.lens = nullptr;
  int64_t cut = 0, active = 0;
  for (int64_t t = 0; t < kQueryLen; ++t) {
    const int64_t window = std::clamp<int64_t>(seq_lens[0] - kQueryLen + t + 1, 0, kSwaColumns);
    for (int32_t c = 0; c < kSwaColumns; ++c) {
      const int32_t index = p.indices[t * config.width + c];
      const bool want = index >= 0 && index < config.swa_rows && c < window;
      ASSERT_EQ(reference::dsv4_column(args, t, c).active, want) << "token " << t << " column " << c;
      cut += index >= 0 && c >= window;
      active += want;
    }
  }
  EXPECT_GT(cut, 1000);
  EXPECT_GT(active, int64_t{kQueryLen} * 100);
  for (auto& len : p.lens) len = 24;
  args.lens = p.lens.data();
  const reference::Dsv4Result ref = reference::dsv4_decode(args);
  test::expect_host_matches(test::run_host(args), ref, kQueryLen, config.heads, ref.out_of_range);
}

// Varlen requests of 17, 0, 128 and 257 tokens (max_q_len 257).
TEST(Dsv4QueryLen, VarlenBeyondSixteen) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  const std::vector<int32_t> cum = {0, 17, 17, 145, 402}, seq_lens = {30, 5, 130, 557};
  testing::Dsv4ProblemConfig config = test::small_config(seed, DType::kBFloat16, 8, 128, cum.back());
  config.q_len = 257;
  const testing::Dsv4Problem p = testing::make_dsv4_problem(config);
  Dsv4DecodeArgs args = p.host_args(nullptr, nullptr);
  args.seq_lens = seq_lens.data();
  args.cum_seq_lens_q = cum.data();
  args.num_requests = 4;
  args.max_q_len = 257;
  EXPECT_GT(window_cut_columns(args), 0);
  test::check_problem(args);
}

// HCA takes any q_len too: 3 requests of 40 tokens, and varlen up to 33.
TEST(Dsv4QueryLen, HcaBeyondSixteen) {
  for (bool varlen : {false, true}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::seed_message(seed) + (varlen ? ", varlen" : ", uniform"));
    testing::Dsv4HcaProblemConfig c;
    c.seed = seed, c.tokens = 120, c.q_len = varlen ? 33 : 40, c.varlen = varlen, c.heads = 8;
    const testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
    test::check_hca_problem(p);
  }
}

}  // namespace
}  // namespace sparse_decode
