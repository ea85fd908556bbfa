// The measured bounds of kAuto's choice for dsv4_decode (choose_kernel) and
// of the stream kernel's P V warps: one table, one line of rationale an
// entry. The measurements behind each: docs/dispatch.md.
#pragma once

#include <cstdint>

namespace sparse_decode::dsv4 {

// Units (token x head group) up to which the cluster kernel runs; 0: never.
struct ClusterBounds {
  int64_t before_split_wide;   // with the split workspace, W > 1024 (never at W <= 1024: split wins from 1 unit)
  int64_t without_split;       // without it, W <= 1024 (against the stream kernel)
  int64_t without_split_wide;  // without it, W > 1024
};

struct DispatchRules {
  // The split path serves more column groups than this (W > 128): at W = 128 the stream kernel wins.
  int32_t split_min_groups = 2;
  // Except BF16 at W = 128 (2 groups): the split path wins up to this many units (ties at 24).
  int64_t split_max_units_narrow_bf16 = 16;
  // The split path runs while the GPU holds at least this many split CTAs a unit at once:
  // 64 heads: below it the stream kernel's dim halves win (30.5 against 35.3 µs at 32 units, W = 640).
  int64_t split_min_ctas_64_heads = 5;
  // 16 heads, W <= 1024: below it the dim halves win (from ~38 units, FP8 and BF16).
  int64_t split_min_ctas = 7;
  // FP8, W > 1024: split 3 % faster at 48 tokens, 1.6 % slower at 64.
  int64_t split_min_ctas_wide_fp8 = 4;
  // BF16, W > 1024: split 5 % slower at 48 tokens.
  int64_t split_min_ctas_wide_bf16 = 6;
  // FP8: the split path beats the cluster kernel from 1 unit; without it, the stream kernel from 24 / 40 units.
  ClusterBounds cluster_fp8 = {0, 20, 32};
  // BF16: the cluster kernel beats split up to 8 units at W > 1024; the stream kernel from 16 / 24 units.
  ClusterBounds cluster_bf16 = {8, 12, 16};
  // The deep stream kernel's P V warps pay from this many chunks a token (W > 256; +0.5 % at 4 chunks).
  int32_t pv_warps_min_chunks = 5;
};

inline constexpr DispatchRules kDispatchRules{};

}  // namespace sparse_decode::dsv4
