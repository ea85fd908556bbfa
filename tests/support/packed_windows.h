// The sliding window of seq_lens for the tests of dsv4_decode_packed
// (docs/spec.md, sections 1 and 2): the SWA segment's indices with the
// window applied by hand, so that a call with seq_lens can be compared with
// the call without seq_lens on those indices (the same active columns, so
// the same bits). Written from the contract, independently of the library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sparse_decode/types.h"
#include "testing/dsv4_packed_problem.h"

namespace sparse_decode::test {

// Requests of a call: seq_lens [B], and a uniform q_len or cum [B + 1].
struct PackedRequests {
  std::vector<int32_t> seq_lens;
  int32_t q_len = 0;         // uniform (cum empty)
  std::vector<int32_t> cum;  // varlen
};

// Position of token t: seq_lens[b] - q_len_b + i; false when no request holds t.
inline bool packed_position(const PackedRequests& r, int64_t t, int64_t* position) {
  if (r.cum.empty()) {
    const int64_t b = t / r.q_len;
    *position = r.seq_lens[b] - r.q_len + t % r.q_len;
    return true;
  }
  for (size_t b = 0; b + 1 < r.cum.size(); ++b) {
    if (t >= r.cum[b] && t < r.cum[b + 1]) {
      *position = r.seq_lens[b] - (r.cum[b + 1] - r.cum[b]) + (t - r.cum[b]);
      return true;
    }
  }
  return false;
}

// The problem's SWA indices with columns c < 128 past each token's window
// (min(128, p + 1); no column for a token without a request) set to -1;
// `cut` counts those it changed that lay inside the token's lens with an
// index >= 0 (the columns that only the window masks).
inline std::vector<int32_t> windowed_swa_indices(const testing::Dsv4PackedProblem& p, const PackedRequests& r,
                                                 int64_t* cut) {
  std::vector<int32_t> indices = p.swa_indices;
  *cut = 0;
  for (int64_t t = 0; t < p.config.tokens; ++t) {
    int64_t position = -1;
    const int64_t window = packed_position(r, t, &position) ? std::clamp<int64_t>(position + 1, 0, kSwaColumns) : 0;
    const int64_t len = p.swa_lens.empty() ? p.config.swa_width : p.swa_lens[t];
    for (int64_t c = window; c < std::min<int64_t>(kSwaColumns, p.config.swa_width); ++c) {
      int32_t& index = indices[t * p.swa_stride() + c];
      *cut += index >= 0 && c < len;
      index = -1;
    }
  }
  return indices;
}

}  // namespace sparse_decode::test
