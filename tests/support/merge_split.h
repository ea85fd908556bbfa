// A dsv4_decode problem's active columns dealt to R ranks, as decode
// context parallelism deals a token's rows to the GPUs that hold them: rank
// r's copy of the problem keeps the columns it owns, -1 in the active
// columns it does not own, and (rank 0) a `lens` cut after its last owned
// column. Inactive columns stay as they were on every rank. Shared by the CPU
// and GPU split tests (cpu/merge/test_split_ranks.cpp, gpu/merge/).
//
// Sinks: every rank here runs without sinks. A sink counted once needs the
// decode calls' argument that makes exactly one rank add the sink term
// (docs/spec.md section 5); the sink case of these tests comes with that
// argument.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/dsv4_reference.h"
#include "testing/dsv4_problem.h"

namespace sparse_decode::test {

enum class SplitRule {
  kRandom,         // each active column to a random rank
  kWindowOnFirst,  // window columns (0..127) to rank 0, top-k columns to the others
  kLastRankEmpty,  // random over ranks 0..R-2: rank R-1 holds no column of any token
};

inline const char* split_rule_name(SplitRule rule) {
  return rule == SplitRule::kRandom          ? "random"
         : rule == SplitRule::kWindowOnFirst ? "window on rank 0"
                                             : "last rank empty";
}

struct RankSplit {
  std::vector<testing::Dsv4Problem> ranks;  // the problem as each rank sees it
  std::vector<bool> whole;                  // [T]: every active column of the token on one rank
};

// Every third token goes whole to one rank (its row unchanged there, -1 in
// its active columns elsewhere): the merge must give that token the single
// call's bits. The other tokens' active columns are dealt by `rule`.
inline RankSplit split_problem(const testing::Dsv4Problem& problem, int ranks, SplitRule rule, uint64_t seed) {
  const auto& c = problem.config;
  const Dsv4DecodeArgs host = problem.host_args(nullptr, nullptr);
  std::mt19937_64 rng(seed);
  const int owners = rule == SplitRule::kLastRankEmpty && ranks > 1 ? ranks - 1 : ranks;
  RankSplit split;
  split.ranks.assign(ranks, problem);
  split.whole.assign(c.tokens, false);
  for (auto& rank : split.ranks) rank.lens.assign(c.tokens, c.width);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const bool whole = t % 3 == 0;
    split.whole[t] = whole;
    const int whole_owner = static_cast<int>(rng() % owners);
    std::vector<int32_t> last_owned(ranks, -1);
    for (int32_t col = 0; col < c.width; ++col) {
      if (!reference::dsv4_column(host, t, col).active) continue;
      int owner = whole ? whole_owner : static_cast<int>(rng() % owners);
      if (!whole && rule == SplitRule::kWindowOnFirst && ranks > 1) {
        owner = col < kSwaColumns ? 0 : 1 + static_cast<int>(rng() % (ranks - 1));
      }
      for (int r = 0; r < ranks; ++r) {
        if (r != owner) split.ranks[r].indices[t * c.width + col] = -1;
      }
      last_owned[owner] = col;
    }
    const int32_t lens = problem.lens.empty() ? c.width : problem.lens[t];
    for (int r = 0; r < ranks; ++r) split.ranks[r].lens[t] = lens;
    // Rank 0 of a dealt token also loses the columns after its last one through lens.
    if (!whole) split.ranks[0].lens[t] = std::min(lens, last_owned[0] + 1);
  }
  return split;
}

}  // namespace sparse_decode::test
