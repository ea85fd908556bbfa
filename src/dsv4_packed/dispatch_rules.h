// The measured bounds of kAuto's choice between the packed kernels, as one
// table. Units are (token, 16-head group) pairs; chunks are a token's
// 64-column chunks (SWA ones plus extra ones). The bounds are constants, not the
// device's SM count, so that the choice (and with it the output's bits) is
// the same on every Hopper part. The rule and its measurements:
// docs/dispatch.md.
#pragma once

#include <cstdint>
#include <limits>

namespace sparse_decode::dsv4_packed {

// CTAs of the packed kernels an H100/H200 holds at once: 132 SMs x 2. A
// constant, not the device's count, so that a plan (and with it the
// output's bits) is the same on every Hopper part.
inline constexpr int64_t kOneWaveCtas = 264;
// The same for the 64-head form: one CTA an SM.
inline constexpr int64_t kOneWaveH64Ctas = 132;

// Past this many units one wave holds a single CTA a unit: nothing to split.
inline constexpr int64_t kSplitMaxUnits = kOneWaveCtas / 2;

// A split row's max_chunks that holds every token.
inline constexpr int32_t kAnyChunks = std::numeric_limits<int32_t>::max();

// With the workspace, the split path serves tokens of at most `max_chunks`
// chunks up to `max_units` units, and with `past_pair` also past the pair's
// bound (where one CTA a unit takes over).
struct SplitBound {
  int32_t max_chunks;
  int64_t max_units;
  bool past_pair;
};

// Without the split path: a token of at most stream_max_chunks_always chunks
// runs the stream kernel with one CTA a unit; otherwise the cluster kernel up
// to cluster_max_units units, the stream kernel with two CTAs a unit (the
// pair) up to pair_max_units, one CTA a unit beyond. With the workspace, the
// split path first where a `split` row serves the batch.
struct DispatchRules {
  static constexpr int kSplitRows = 4;
  int32_t stream_max_chunks_always;
  int64_t cluster_max_units;
  int64_t pair_max_units;
  SplitBound split[kSplitRows];  // by width: the first row whose max_chunks holds the token's chunks
  // At 64 and 128 heads, for tokens of at most h64_max_chunks chunks and
  // before every other line: the 64-head form (one CTA a (token, 64-head
  // group) unit) from h64_min_units such units on; with the workspace, its
  // split path from h64_split_min_units units on for tokens of at least
  // h64_split_min_chunks chunks.
  int64_t h64_min_units;
  int32_t h64_max_chunks;
  int64_t h64_split_min_units;
  int32_t h64_split_min_chunks;
};

// Measured at 16 heads, µs a layer (H200).
inline constexpr DispatchRules kDispatchRules = {
    2,   // W = 128: the cluster kernel loses at every T (T = 6: 11.3 against one CTA a unit's 9.6)
    16,  // W = 640, T = 12: the cluster kernel 14.7 against the pair's 17.7
    66,  // a pair an SM of a 132-SM part; beyond, the pair loses (T = 96: 28.7 against one CTA a unit's 26.8)
    {
        {2, 64, false},   // W = 128: two CTAs a unit beat one walking both chunks (T = 1: 7.9 against 9.4)
        {10, 32, false},  // W <= 640: from T = 1 (8.7 against 10.0); past 32 the pair wins (T = 40: 18.1 against 19.2)
        {18, 48, true},   // W <= 1152: the pair wins at 49 to 66 units; then split (T = 96: 39.1 against 41.9)
        {kAnyChunks, kSplitMaxUnits, false},  // wider: faster up to one wave (W = 2176, T = 1: 14.9 against 19.5)
    },
    // 64-head units, distinct rows, H200:
    67,  // past one wave of the 16-head kernels (66 units): 64 heads T = 80 49.4 against 59.1 (W = 128: 17.6 against
         // 20.6); at 64 units it loses (W = 128: 17.3 against 14.9)
    10,  // W <= 640; T = 2048 at W = 128, 64 heads: 308.7 against 325.8
    34,  // past 132 16-head units (their split path's bound): W = 640, 64 heads T = 40 31.2 against 39.6, T = 64 37.1
         // against 40.6; at 32 units it loses (27.2 against 26.2)
    7,   // W = 640 (10 chunks); at W = 384 (6 chunks) it ties at 48 units (27.0 against 26.8) and loses at 64
};

// The split rows cover every width, in increasing order.
constexpr bool split_rows_ordered() {
  constexpr int kLast = DispatchRules::kSplitRows - 1;
  for (int i = 1; i <= kLast; ++i) {
    if (kDispatchRules.split[i].max_chunks <= kDispatchRules.split[i - 1].max_chunks) return false;
  }
  return kDispatchRules.split[kLast].max_chunks == kAnyChunks;
}
static_assert(split_rows_ordered(), "split rows by increasing width, the last one for every wider token");
static_assert(kDispatchRules.h64_split_min_units < kDispatchRules.h64_min_units &&
                  kDispatchRules.h64_split_min_chunks <= kDispatchRules.h64_max_chunks,
              "the 64-head split path below the 64-head form's units, within its widths");
static_assert(kDispatchRules.cluster_max_units <= kDispatchRules.pair_max_units,
              "the cluster kernel first, then the pair");

}  // namespace sparse_decode::dsv4_packed
