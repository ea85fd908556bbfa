// The named configurations of the dsv4 kernels, one a kernel instance
// (instantiations/*.cu), and the shared-memory budgets they were measured at.
// Each configuration sets:
//   kHeads          query heads a CTA: 16, or 64 (FP8 stream kernel and split
//                   path of 64-head calls; docs/kernels/heads64.md).
//   kDType          the element type of q and of the KV rows.
//   kKvTiles        KV tiles: with 2 the next chunk's gather lands during
//                   this one's math; with 1 the gather waits for the KV tile
//                   (a CTA of one chunk loses nothing, and a BF16 KV tile is
//                   65 KiB); 4 with producers, for a lone CTA an SM.
//   kProducerWarps  0: the math warps issue their rows' copies themselves;
//                   4: a producer warpgroup issues every copy and the math
//                   warps only wait (docs/kernels/large_batch.md).
//   kDimParts       CTAs that share a unit, each computing all of its scores
//                   but P V for 1 / kDimParts of the dims (2: the stream
//                   kernels when the units fill at most half the SMs).
//   kPvWarps        0: the math warps take every step of a chunk in turn;
//                   8: a second set of math warps runs P V and the fold of
//                   chunk i while the first scores chunk i + 1
//                   (docs/kernels/large_batch.md).
// Each step keeps its float operations whatever the configuration: same bits.
#pragma once

#include "dsv4/smem.cuh"
#include "dsv4/traits.cuh"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4 {

// The cluster kernel holds one KV tile (a CTA has one chunk up to W = 1024)
// so that its 35 KiB of FP32 receive slots fit: FP8 at 2 CTAs an SM, BF16
// (a 65 KiB KV tile) at 1.
struct ClusterFp8 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 1, kProducerWarps = 0, kDimParts = 1, kPvWarps = 0;
};
struct ClusterBf16 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kBFloat16;
  static constexpr int kKvTiles = 1, kProducerWarps = 0, kDimParts = 1, kPvWarps = 0;
};

// The stream kernel keeps two KV tiles filled by a producer warpgroup (FP8:
// 2 CTAs an SM, BF16: 1; docs/kernels/bf16.md).
struct StreamFp8 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 2, kProducerWarps = 4, kDimParts = 1, kPvWarps = 0;
};
struct StreamBf16 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kBFloat16;
  static constexpr int kKvTiles = 2, kProducerWarps = 4, kDimParts = 1, kPvWarps = 0;
};

// The split kernel: FP8 with two KV tiles (runs of several groups overlap
// the next chunk's gather; the math warps issue the copies), BF16 as the
// cluster kernel (one KV tile).
struct SplitFp8 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 2, kProducerWarps = 0, kDimParts = 1, kPvWarps = 0;
};
using SplitBf16 = ClusterBf16;

// The deep stream kernel, for calls of at most one unit an SM: 4 KV tiles in
// flight at 1 CTA an SM, so that a lone CTA's chunks do not wait for the
// row latency (docs/kernels/large_batch.md).
struct StreamDeepFp8 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 4, kProducerWarps = 4, kDimParts = 1, kPvWarps = 0;
};
// The same with P V warps: P V of chunk i beside Q K^T and the softmax of chunk i + 1.
struct StreamPvWarpsFp8 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 4, kProducerWarps = 4, kDimParts = 1, kPvWarps = 8;
};

// 64 heads a CTA: FP8 only, two KV tiles, one CTA an SM; the stream kernel
// with a producer warpgroup (232 registers a math thread), the split kernel
// without (docs/kernels/heads64.md).
struct StreamFp8H64 {
  static constexpr int kHeads = 64;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 2, kProducerWarps = 4, kDimParts = 1, kPvWarps = 0;
};
struct SplitFp8H64 {
  static constexpr int kHeads = 64;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 2, kProducerWarps = 0, kDimParts = 1, kPvWarps = 0;
};

// The deep, the BF16 and the 64-head stream kernels in two dim parts: two
// CTAs a unit, for calls of at most one unit per two SMs.
struct StreamHalvesFp8 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 4, kProducerWarps = 4, kDimParts = 2, kPvWarps = 0;
};
struct StreamHalvesBf16 {
  static constexpr int kHeads = 16;
  static constexpr DType kDType = DType::kBFloat16;
  static constexpr int kKvTiles = 2, kProducerWarps = 4, kDimParts = 2, kPvWarps = 0;
};
struct StreamHalvesFp8H64 {
  static constexpr int kHeads = 64;
  static constexpr DType kDType = DType::kFloat8E4M3;
  static constexpr int kKvTiles = 2, kProducerWarps = 4, kDimParts = 2, kPvWarps = 0;
};

using ClusterTraitsFp8 = Dsv4Traits<ClusterFp8>;
using ClusterTraitsBf16 = Dsv4Traits<ClusterBf16>;
using StreamTraitsFp8 = Dsv4Traits<StreamFp8>;
using StreamTraitsBf16 = Dsv4Traits<StreamBf16>;
using SplitTraitsFp8 = Dsv4Traits<SplitFp8>;
using SplitTraitsBf16 = Dsv4Traits<SplitBf16>;
using StreamDeepTraitsFp8 = Dsv4Traits<StreamDeepFp8>;
using StreamPvWarpsTraitsFp8 = Dsv4Traits<StreamPvWarpsFp8>;
using StreamTraitsFp8H64 = Dsv4Traits<StreamFp8H64>;
using SplitTraitsFp8H64 = Dsv4Traits<SplitFp8H64>;
using StreamHalvesTraitsFp8 = Dsv4Traits<StreamHalvesFp8>;
using StreamHalvesTraitsBf16 = Dsv4Traits<StreamHalvesBf16>;
using StreamHalvesTraitsFp8H64 = Dsv4Traits<StreamHalvesFp8H64>;

// The general form of a configuration's kernels (traits.cuh: kGeneralForm).
template <class Traits>
using GeneralTraits = Dsv4Traits<typename Traits::Config, true>;
// The page-walk form of a configuration's kernels (traits.cuh: kPageWalkForm).
template <class Traits>
using PageWalkTraits = Dsv4Traits<typename Traits::Config, true, true>;

static_assert(sizeof(ClusterSmem<ClusterTraitsFp8>) <= kMaxSmemPerCta &&
                  sizeof(StreamSmem<StreamTraitsFp8>) <= kMaxSmemPerCta &&
                  sizeof(ClusterSmem<ClusterTraitsBf16>) <= kMaxSmemPerCta &&
                  sizeof(StreamSmem<StreamTraitsBf16>) <= kMaxSmemPerCta,
              "a CTA's shared memory is at most 227 KiB on Hopper");
static_assert(resident_ctas(sizeof(ClusterSmem<ClusterTraitsFp8>)) == 2 &&
                  resident_ctas(sizeof(StreamSmem<StreamTraitsFp8>)) == 2 &&
                  resident_ctas(sizeof(SplitSmem<SplitTraitsFp8>)) == 2,
              "the FP8 kernels were measured at 2 CTAs an SM");
static_assert(sizeof(StreamSmem<StreamHalvesTraitsFp8>) == sizeof(StreamSmem<StreamDeepTraitsFp8>) &&
                  sizeof(StreamSmem<StreamHalvesTraitsBf16>) == sizeof(StreamSmem<StreamTraitsBf16>) &&
                  sizeof(StreamSmem<StreamDeepTraitsFp8>) <= kMaxSmemPerCta &&
                  resident_ctas(sizeof(StreamSmem<StreamDeepTraitsFp8>)) == 1 &&
                  sizeof(StreamSmem<StreamPvWarpsTraitsFp8>) <= kMaxSmemPerCta,
              "the deep stream kernel: 4 KV tiles, 1 CTA an SM");
static_assert(sizeof(StreamSmem<StreamTraitsFp8H64>) <= kMaxSmemPerCta &&
                  sizeof(StreamSmem<StreamHalvesTraitsFp8H64>) == sizeof(StreamSmem<StreamTraitsFp8H64>),
              "64 heads: two 33 KiB KV tiles, the 32 KiB Q tile and 34 KiB of scores fit one CTA an SM");

}  // namespace sparse_decode::dsv4
