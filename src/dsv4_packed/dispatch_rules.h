// The measured bounds of kAuto's choice between the packed kernels, as one
// table. Units are (token, 16-head group) pairs; chunks are a token's
// 64-column chunks (SWA ones plus extra ones). The bounds are constants, not the
// device's SM count, so that the choice (and with it the output's bits) is
// the same on every Hopper part. The measurements behind them:
// docs/kernels/packed.md.
#pragma once

#include <cstdint>
#include <limits>

namespace sparse_decode::dsv4_packed {

// CTAs of the packed kernels an H100/H200 holds at once: 132 SMs x 2. A
// constant, not the device's count, so that a plan (and with it the
// output's bits) is the same on every Hopper part.
inline constexpr int64_t kOneWaveCtas = 264;

// Past this many units one wave holds a single CTA a unit: nothing to split.
inline constexpr int64_t kSplitMaxUnits = kOneWaveCtas / 2;

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
  static constexpr int kSplitRows = 5;
  int32_t stream_max_chunks_always;
  int64_t cluster_max_units;
  int64_t pair_max_units;
  SplitBound split[kSplitRows];  // by width: the first row whose max_chunks holds the token's chunks
};

inline constexpr DispatchRules kDispatchRules = {
    2,   // W <= 128: one CTA a unit beats the cluster kernel at every T measured (1 to 256)
    16,  // W = 640, T = 12: the cluster kernel 14.7 µs, the pair 17.7 (17 to 19 units not measured)
    66,  // one pair an SM of a 132-SM part; beyond, one CTA a unit
    {
        {2, 64, false},   // W <= 128: two CTAs a unit beat one walking both chunks (a tie at 64)
        {4, 32, false},   // W <= 256: from 40 units the stream kernel wins
        {10, 32, false},  // W <= 640: from 1 unit (T = 1: 8.7 µs, the cluster kernel 10.0); past 32 the pair
        {18, 48, true},   // W <= 1152: the pair wins from 49 to 66 units; beyond, one CTA a unit loses
        {std::numeric_limits<int32_t>::max(), kSplitMaxUnits, false},  // wider: faster up to one wave
    }};

// The split rows cover every width, in increasing order.
constexpr bool split_rows_ordered() {
  constexpr int kLast = DispatchRules::kSplitRows - 1;
  for (int i = 1; i <= kLast; ++i) {
    if (kDispatchRules.split[i].max_chunks <= kDispatchRules.split[i - 1].max_chunks) return false;
  }
  return kDispatchRules.split[kLast].max_chunks == std::numeric_limits<int32_t>::max();
}
static_assert(split_rows_ordered(), "split rows by increasing width, the last one for every wider token");
static_assert(kDispatchRules.cluster_max_units <= kDispatchRules.pair_max_units,
              "the cluster kernel first, then the pair");

}  // namespace sparse_decode::dsv4_packed
