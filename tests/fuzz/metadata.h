// Random and adversarial metadata shared by the operations: index tables,
// per-token lengths, and the request mapping (uniform q_len or
// cum_seq_lens_q with seq_lens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz.h"

namespace sparse_decode::fuzz {

// A table [rows, stride] of indices into pools: column c of a row names a
// row of pool_rows(c) (0: the pool is absent). Whole rows are sometimes all
// -1, all past their pool or one row repeated; otherwise each column is a
// valid row, -1, an edge value (INT32_MIN, the pool's row count exactly,
// INT32_MAX, ...) or the previous column's index again. Padding columns
// (width..stride) hold garbage that is never read.
template <typename PoolRows>
std::vector<int32_t> draw_index_table(Rng& rng, int64_t rows, int32_t width, int64_t stride, PoolRows&& pool_rows) {
  std::vector<int32_t> table(static_cast<size_t>(std::max<int64_t>(rows, 1) * stride));
  for (int64_t r = 0; r < rows; ++r) {
    const int mode = static_cast<int>(rng.uniform(0, 11));
    int32_t repeated = -1;
    for (int32_t c = 0; c < stride; ++c) {
      int32_t& v = table[static_cast<size_t>(r * stride + c)];
      const int64_t count = c < width ? pool_rows(c) : 0;
      if (c >= width) {
        v = rng.chance(0.5) ? draw_edge_int(rng, 1000) : static_cast<int32_t>(rng.uniform(0, 1 << 20));
      } else if (mode == 0) {
        v = -1;
      } else if (mode == 1) {
        v = rng.chance(0.5) ? static_cast<int32_t>(count) : draw_edge_int(rng, count);
      } else if (mode == 2) {
        if (repeated < 0 || repeated >= count) repeated = count > 0 ? static_cast<int32_t>(rng.uniform(0, count - 1)) : -1;
        v = repeated;
      } else {
        const double u = rng.real(0.0, 1.0);
        if (u < 0.10) {
          v = -1;
        } else if (u < 0.20) {
          v = draw_edge_int(rng, count);
        } else if (u < 0.30 && c > 0) {
          v = table[static_cast<size_t>(r * stride + c - 1)];
        } else {
          v = count > 0 ? static_cast<int32_t>(rng.uniform(0, count - 1)) : -1;
        }
      }
    }
  }
  return table;
}

// A token's length: mostly in [0, width], else an edge (0, width, width + 1,
// 127, 128, 129, -1, INT32_MIN, INT32_MAX).
int32_t draw_len(Rng& rng, int32_t width);

// The request mapping of a call over `tokens` tokens.
struct Requests {
  enum class Mode { kNone, kUniform, kVarlen } mode = Mode::kNone;
  int32_t num_requests = 0, q_len = 0, max_q_len = 0;
  std::vector<int32_t> seq_lens;        // [B]
  std::vector<int32_t> cum_seq_lens_q;  // [B + 1] (varlen)
  bool monotone = true;                 // false: cum_seq_lens_q decreases somewhere (garbage)
  std::string describe() const;
};

// Draws a mapping: none (when `optional`), uniform q_len (a divisor of the
// tokens) or varlen offsets: non-decreasing, starting at 0 or a little
// after, ending at the tokens, short of them (padding) or past them, with
// empty requests; now and then decreasing (`allow_garbage`). seq_lens are
// the query length plus a random history, or edges (INT32_MIN, 0, q_len -
// 1, INT32_MAX, ...).
Requests draw_requests(Rng& rng, int64_t tokens, bool optional, bool allow_garbage);

// The argument that a host-memory call refuses for these requests, or "":
// cum_seq_lens_q unless 0 <= cum[0] <= ... <= cum[B] <= tokens, then
// max_q_len when a request is longer (the host reads host metadata).
std::string host_refusal(const Requests& r, int64_t tokens);

// Short summaries of int arrays for the case descriptions.
std::string ints(const std::vector<int32_t>& values, size_t limit = 16);

}  // namespace sparse_decode::fuzz
