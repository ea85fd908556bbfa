// The CPU reference's threads (src/reference/parallel.h): every item in one
// block, the first exception rethrown, and the token loop's bits the same
// with the tokens on many threads as with each token alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference/dsv4_reference.h"
#include "reference/parallel.h"
#include "support/test_support.h"

namespace sparse_decode::reference {
namespace {

constexpr double kThreadedWork = 1e12;  // above the threshold: as many threads as the machine has

TEST(ReferenceThreads, EveryItemInExactlyOneBlock) {
  for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{31}, int64_t{1000}}) {
    for (const double work : {0.0, kThreadedWork}) {
      std::vector<int> seen(static_cast<size_t>(count), 0);
      for_blocks(count, work, [&](int64_t first, int64_t last) {
        ASSERT_LE(0, first);
        ASSERT_LE(first, last);
        ASSERT_LE(last, count);
        for (int64_t i = first; i < last; ++i) ++seen[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "count " << count << ", item " << i;
    }
  }
}

TEST(ReferenceThreads, RethrowsABlocksException) {
  const auto throw_at = [](int64_t item) {
    return [item](int64_t first, int64_t last) {
      if (first <= item && item < last) throw std::runtime_error("item");
    };
  };
  EXPECT_THROW(for_blocks(1000, kThreadedWork, throw_at(999)), std::runtime_error);
  EXPECT_THROW(for_blocks(1000, kThreadedWork, throw_at(0)), std::runtime_error);
  EXPECT_THROW(for_blocks(5, 0.0, throw_at(4)), std::runtime_error);
}

// Random rows and queries, a token's row count from 0 to `width`; the token
// loop over all tokens (threaded: the work is above the threshold) against
// each token alone (one thread), bit for bit.
TEST(ReferenceThreads, TokenLoopBitsDoNotDependOnThreads) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::seed_message(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  constexpr int64_t kTokens = 96;
  constexpr int kHeads = 16;
  constexpr int kWidth = 640;
  std::vector<std::vector<double>> rows(kTokens), queries(kTokens);
  std::vector<int64_t> out_of_range(kTokens);
  std::uniform_int_distribution<int> row_count(0, kWidth);
  for (int64_t t = 0; t < kTokens; ++t) {
    rows[t].resize(static_cast<size_t>(t % 7 == 3 ? 0 : row_count(rng)) * kHeadDim);
    for (double& x : rows[t]) x = normal(rng);
    queries[t].resize(static_cast<size_t>(kHeads) * kHeadDim);
    for (double& x : queries[t]) x = normal(rng);
    out_of_range[t] = t % 5;
  }
  std::vector<float> sinks(kHeads);
  for (float& s : sinks) s = static_cast<float>(normal(rng));
  const auto run = [&](int64_t first, int64_t tokens) {
    return attend_tokens(
        tokens, kHeads, kWidth, 0.04, 1.0, sinks.data(), SinkTerm::kInOutputAndLse,
        [&](int64_t t, std::vector<double>& kv) {
          kv = rows[first + t];
          return out_of_range[first + t];
        },
        [&](int64_t t, int h, double* q) {
          std::memcpy(q, &queries[first + t][static_cast<size_t>(h) * kHeadDim], kHeadDim * sizeof(double));
        });
  };
  const Dsv4Result all = run(0, kTokens);
  int64_t expected_out_of_range = 0;
  for (int64_t t = 0; t < kTokens; ++t) {
    const Dsv4Result alone = run(t, 1);
    expected_out_of_range += out_of_range[t];
    const size_t out_at = static_cast<size_t>(t) * kHeads * kHeadDim, lse_at = static_cast<size_t>(t) * kHeads;
    EXPECT_EQ(std::memcmp(&all.out[out_at], alone.out.data(), alone.out.size() * sizeof(double)), 0) << "token " << t;
    EXPECT_EQ(std::memcmp(&all.lse[lse_at], alone.lse.data(), alone.lse.size() * sizeof(double)), 0) << "token " << t;
  }
  EXPECT_EQ(all.out_of_range, expected_out_of_range);
}

}  // namespace
}  // namespace sparse_decode::reference
