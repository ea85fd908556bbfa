// Test-side helpers for dsv4_decode_hca: the public host call with poisoned
// outputs, exact comparison of two fp64 results, and the full check of a
// synthetic problem against section 1 on its expansion.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "support/dsv4_checks.h"
#include "reference/dsv4_hca_reference.h"
#include "reference/dsv4_reference.h"
#include "sparse_decode/dsv4_decode_hca.h"
#include "testing/dsv4_hca_problem.h"

namespace sparse_decode::test {

inline HostOutput run_hca_host(const Dsv4HcaDecodeArgs& args) {
  return run_host_call(args, [](const Dsv4HcaDecodeArgs& a) { return dsv4_decode_hca(a, nullptr, 0, nullptr); });
}

// Bitwise the same doubles: both sides feed the same rows in the same order
// to the same softmax, so nothing may differ, not even by rounding.
inline void expect_same_result(const reference::Dsv4Result& got, const reference::Dsv4Result& want,
                               const char* what) {
  ASSERT_EQ(got.out.size(), want.out.size()) << what;
  ASSERT_EQ(got.lse.size(), want.lse.size()) << what;
  for (size_t i = 0; i < want.lse.size(); ++i) {
    ASSERT_TRUE(std::memcmp(&got.lse[i], &want.lse[i], sizeof(double)) == 0)
        << what << ": lse[" << i << "] = " << got.lse[i] << ", expected " << want.lse[i];
  }
  for (size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_TRUE(std::memcmp(&got.out[i], &want.out[i], sizeof(double)) == 0)
        << what << ": out[" << i / kHeadDim << " (token * H + head), " << i % kHeadDim << "] = " << got.out[i]
        << ", expected " << want.out[i];
  }
  EXPECT_EQ(got.out_of_range, want.out_of_range) << what;
}

// Tokens whose every head got lse = -inf (nothing active).
inline int64_t empty_tokens(const reference::Dsv4Result& r, int heads) {
  int64_t empty = 0;
  for (size_t t = 0; t * heads < r.lse.size(); ++t) empty += std::isinf(r.lse[t * heads]) && r.lse[t * heads] < 0;
  return empty;
}

// The HCA reference equals section 1's on the expansion; the public host
// call writes it as BF16 (3e-3), float lse and the counter, every element
// finite. Returns the reference result.
inline reference::Dsv4Result check_hca_problem(const testing::Dsv4HcaProblem& p) {
  const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);
  const testing::Dsv4HcaExpansion expansion = testing::expand_to_section1(p);
  const Dsv4DecodeArgs section1 = expansion.args(p, nullptr, nullptr);
  const reference::Dsv4Result ref = reference::dsv4_decode_hca(args);
  expect_same_result(ref, reference::dsv4_decode(section1), "HCA reference vs section 1 on the expansion");

  const int64_t T = args.num_tokens;
  const int H = args.num_heads;
  expect_host_matches(run_hca_host(args), ref, T, H, ref.out_of_range);
  return ref;
}

// Out-of-range and negative ids among the active ones: in each token that
// attends slots, a page past the pool (or INT32_MAX: page * page_size then
// overflows int32) and a negative page (-1 or INT32_MIN); in each token with
// a window, a row past the pool (or INT32_MAX) and a row -3. Returns the
// count SPEC section 3 gives, straight from its rule: every active slot or
// window column whose page or row is past its pool.
// The state of the edge-case suites (CPU and GPU): a fresh seed, a problem,
// and a generator for the changes a test makes to it. SetUp calls start().
template <class Base>
class HcaEdgeFixture : public Base {
 protected:
  void start(const testing::Dsv4HcaProblemConfig& config) {
    problem_ = testing::make_dsv4_hca_problem(config);
    rng_.seed(seed_ ^ 0x9E3779B97F4A7C15ull);
  }
  uint64_t seed_ = fresh_seed();
  testing::Dsv4HcaProblem problem_;
  std::mt19937_64 rng_;
};

// A varlen problem whose offsets stop `unheld` tokens short of T (as
// CUDA-graph padding does): those tokens belong to no request.
inline testing::Dsv4HcaProblem with_unheld_tokens(testing::Dsv4HcaProblemConfig c, int32_t unheld) {
  c.varlen = true;
  testing::Dsv4HcaProblem p = testing::make_dsv4_hca_problem(c);
  for (auto& offset : p.cum_seq_lens_q) offset = std::min(offset, static_cast<int32_t>(c.tokens - unheld));
  return p;
}

inline int64_t break_active_ids(testing::Dsv4HcaProblem& p, std::mt19937_64& rng) {
  const auto& c = p.config;
  const Dsv4HcaDecodeArgs args = p.host_args(nullptr, nullptr);  // the slot count depends on lens only
  std::vector<int64_t> slots(c.tokens);
  for (int64_t t = 0; t < c.tokens; ++t) {
    slots[t] = reference::hca_compressed_slots(args, t);
    if (slots[t] > 0) {
      const int64_t pages = (slots[t] + c.page_size - 1) / c.page_size;
      p.block_table[t * c.max_pages + static_cast<int64_t>(rng() % pages)] =
          rng() % 2 ? static_cast<int32_t>(c.compressed_pages + rng() % 5) : INT32_MAX;
      p.block_table[t * c.max_pages + static_cast<int64_t>(rng() % pages)] = rng() % 2 ? -1 : INT32_MIN;
    }
    const int32_t window = std::clamp(p.swa_lens[t], 0, kSwaColumns);
    if (window > 0) {
      p.swa_rows[t * kSwaColumns + rng() % window] = rng() % 2 ? static_cast<int32_t>(c.swa_rows + rng() % 7) : INT32_MAX;
      p.swa_rows[t * kSwaColumns + rng() % window] = -3;
    }
  }
  int64_t expected = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = 0; j < slots[t]; ++j) expected += p.block_table[t * c.max_pages + j / c.page_size] >= c.compressed_pages;
    for (int col = 0; col < std::clamp(p.swa_lens[t], 0, kSwaColumns); ++col) {
      expected += p.swa_rows[t * kSwaColumns + col] >= c.swa_rows;
    }
  }
  return expected;
}

}  // namespace sparse_decode::test
