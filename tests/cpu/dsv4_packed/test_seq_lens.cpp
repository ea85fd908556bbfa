// The seq_lens window of dsv4_decode_packed on the CPU backend (docs/spec.md,
// sections 1 and 2): SWA columns c < 128 are active only if c < min(128,
// p + 1), p the token's position from seq_lens and its request (uniform
// q_len or cum_seq_lens_q, of any length); columns from 128 on and the extra
// segment are not touched. Oracle: the call without seq_lens on indices with
// the window applied by hand (support/packed_windows.h) gives the same bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/dsv4_packed_reference.h"
#include "support/dsv4_hca_checks.h"
#include "support/dsv4_packed_checks.h"
#include "support/packed_windows.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode {
namespace {

void check_window(testing::Dsv4PackedProblemConfig config, const test::PackedRequests& requests, const char* what) {
  const uint64_t seed = test::fresh_seed();
  config.seed = seed;
  SCOPED_TRACE(std::string(what) + ", " + test::seed_message(seed));
  const testing::Dsv4PackedProblem p = testing::make_dsv4_packed_problem(config);
  Dsv4PackedDecodeArgs args = p.host_args(nullptr, nullptr);
  args.seq_lens = requests.seq_lens.data();
  args.num_requests = static_cast<int32_t>(requests.seq_lens.size());
  if (requests.cum.empty()) {
    args.q_len = requests.q_len;
  } else {
    args.cum_seq_lens_q = requests.cum.data();
    args.max_q_len = 0;
    for (size_t b = 0; b + 1 < requests.cum.size(); ++b) {
      args.max_q_len = std::max(args.max_q_len, requests.cum[b + 1] - requests.cum[b]);
    }
  }
  int64_t cut = 0;
  const std::vector<int32_t> windowed = test::windowed_swa_indices(p, requests, &cut);
  EXPECT_GT(cut, 0) << "no column is cut by the window alone: the test proves little";
  Dsv4PackedDecodeArgs plain = p.host_args(nullptr, nullptr);
  plain.swa.indices = windowed.data();

  test::expect_same_result(reference::dsv4_decode_packed(args), reference::dsv4_decode_packed(plain),
                           "seq_lens window vs the window applied to the indices");
  const test::HostOutput with_seq_lens = test::run_packed_host(args), windowed_call = test::run_packed_host(plain);
  EXPECT_TRUE(with_seq_lens.out == windowed_call.out);
  EXPECT_EQ(std::memcmp(with_seq_lens.lse.data(), windowed_call.lse.data(), with_seq_lens.lse.size() * 4), 0);
  EXPECT_EQ(with_seq_lens.count, windowed_call.count);
}

// 4 requests of 3 tokens: seq_lens 2 (positions -1..1), 60, 130 and 300.
TEST(PackedSeqLens, UniformQueryLength) {
  testing::Dsv4PackedProblemConfig c = test::packed_config(0, 16, 12);
  check_window(c, {{2, 60, 130, 300}, 3, {}}, "SWA 128 + extra 256");
  c.swa_lens = false;  // unfilled columns -1, no SWA lens
  check_window(c, {{5, 40, 3, 127}, 3, {}}, "no SWA lens");
}

// A 256-column SWA segment: the window cuts only columns below 128.
TEST(PackedSeqLens, WideWindowSegmentKeepsColumnsFrom128) {
  testing::Dsv4PackedProblemConfig c = test::packed_config(0, 16, 12, 0);
  c.swa_width = 256;
  c.short_fraction = 0.0;
  check_window(c, {{3, 20, 64, 500}, 3, {}}, "SWA 256, no extra");
}

// Varlen requests of 1, 3, 5 and 3 tokens (seq_lens 2, 3, 130, 70), an empty
// request and tokens that no request holds (their SWA columns are all cut).
TEST(PackedSeqLens, Varlen) {
  testing::Dsv4PackedProblemConfig c = test::packed_config(0, 16, 12);
  check_window(c, {{2, 3, 130, 70}, 0, {0, 1, 4, 9, 12}}, "varlen");
  check_window(c, {{9, 4, 40}, 0, {1, 3, 3, 10}}, "empty request, padding tokens");
}

// Requests longer than 16 tokens: 257 in one, and varlen of 17, 0 and 128.
TEST(PackedSeqLens, LongRequests) {
  testing::Dsv4PackedProblemConfig c = test::packed_config(0, 8, 257, 0);
  c.q_len = 257;
  c.short_fraction = 0.0;  // full windows: the seq_lens below cut them
  check_window(c, {{257 + 30}, 257, {}}, "q_len 257");
  c.tokens = 145;
  c.q_len = 145;
  check_window(c, {{20, 7, 150}, 0, {0, 17, 17, 145}}, "varlen 17, 0, 128");
}

}  // namespace
}  // namespace sparse_decode
