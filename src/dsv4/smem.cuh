// The shared-memory plans of the dsv4 kernels (the sizeof of each kernel's
// plan is its dynamic shared memory), the split path's workspace record, the
// register split of the kernels with a producer warpgroup, and the layout of
// a thread's P V fragment.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsv4/traits.cuh"

namespace sparse_decode::dsv4 {

// Registers a thread of a kernel with a producer warpgroup holds at
// `ctas` CTAs an SM: all at launch, then (setmaxnreg) the producers give
// theirs down to kProducer and the math warps (P V warps included)
// take them. The pool is what the CTA got at launch; counts are multiples of 8.
template <class Traits, int kCtas>
struct ProducerRegisters {
  static constexpr int kLaunch = (65536 / kCtas / Traits::kLaunchThreads) / 8 * 8;
  static constexpr int kProducer = 32;
  static constexpr int kMathThreads = Traits::kThreads + Traits::kPvThreads;
  static constexpr int kMath =
      ((kLaunch * Traits::kLaunchThreads - kProducer * 32 * Traits::kProducerWarps) / kMathThreads) / 8 * 8;
  static_assert(kProducer * 32 * Traits::kProducerWarps + kMath * kMathThreads <= kLaunch * Traits::kLaunchThreads,
                "setmaxnreg moves registers within the CTA's launch allocation");
  static_assert(kMath >= 96, "the math warps need ~100 registers or spill the chunk steps");
};

// The 4 values of granule g travel in the order (n-tile 0, n-tile 1) x
// (fragment column 0, 1) of its 16-dim half. FP8 P V computes dims 2n (even
// n-tile) and 2n + 1 (odd) of a half, so granule g is dims 4g..4g+3 in that
// order. BF16 P V computes dims 8t + n of n-tile t, so granule g (half
// h = g / 4, q = g % 4) is dims 16h + {2q, 2q + 8, 2q + 1, 2q + 9}.
template <class Traits>
__host__ __device__ constexpr int granule_dim(int granule, int value) {
  if constexpr (!Traits::kBf16) {
    return granule * Traits::kGranuleDims + value;
  } else {
    return 16 * (granule / 4) + 2 * (granule % 4) + 8 * (value % 2) + value / 2;
  }
}

// A thread's share of a group's P V over kBlocks of its warp's dim blocks:
// [head tile][dim block][16-dim half][even/odd n-tile][top head x2, bottom head x2];
// head tile t's heads are 16t + lane / 4 (top) and 16t + lane / 4 + 8 (bottom).
template <class Traits, int kBlocks>
using DimBlockFragment = float[Traits::kHeadTiles][kBlocks][2][2][4];

// The warp's dims this CTA outputs: 32 floats a thread at 16 heads, 128 at
// 64 (half of that with two dim parts).
template <class Traits>
using OutputFragment = DimBlockFragment<Traits, Traits::kOutputDimBlocks>;

// The next chunk's column entries, copied with this chunk's rows (two KV
// tiles); a walk with one KV tile loads each chunk's entries when it
// gathers the chunk.
template <int kKvTiles, int kColumns>
struct StagedEntries {
  int32_t entry[kKvTiles][kColumns];
};
template <int kColumns>
struct StagedEntries<1, kColumns> {};

// A KV tile: row-major rows padded to kTileRowBytes (one bulk copy a row).
template <class Traits>
using KvTile = uint8_t[Traits::kChunkColumns][Traits::kTileRowBytes];

// What every kernel keeps per chunk.
template <class Traits>
struct ChunkSmem {
  static constexpr int kHeads = Traits::kHeads;
  alignas(16) KvTile<Traits> kv[Traits::kKvTiles];  // gathered rows: K and V (bulk copies: 16-byte aligned rows)
  uint64_t rows_landed[Traits::kKvTiles];  // bulk rows: a KV tile's copies completed (one arrival a copying warp)
  alignas(16) uint8_t q[kHeads / 8][Traits::kPieces][8][16];  // the Q tile: [8-row slab][piece][row % 8][byte]
  // The next five per chunk slot (chunk i's in slot i % kChunkSlots); scores: each warpgroup's share of Q K^T.
  float scores[Traits::kChunkSlots][Traits::kWarpgroups][kHeads][Traits::kScoreRowFloats];
  // exp2(score - running max): FP16 bits (FP8 rows) or BF16 hi, lo bits (BF16 rows)
  uint16_t probs[Traits::kChunkSlots][Traits::kProbParts][kHeads][Traits::kProbRowHalves];
  float running_max[Traits::kChunkSlots][kHeads];  // log2 domain, over the group's columns so far
  float running_sum[Traits::kChunkSlots][kHeads];  // sum of the rounded probabilities that P V multiplies
  float rescale[Traits::kChunkSlots][kHeads];      // factor on O when the running max moves
  float sink_log2[kHeads];                            // sink * log2(e), -inf without sinks
  StagedEntries<Traits::kKvTiles, Traits::kChunkColumns> staged;
  int32_t request;                                    // the token's request (varlen seq_lens), -1 if none
  alignas(8) uint8_t column_mask[Traits::kKvTiles][Traits::kWarps];  // active columns of a KV tile, 8 a warp
};

// The cluster kernel: one CTA a group, groups exchanged through DSMEM.
template <class Traits>
struct ClusterSmem {
  ChunkSmem<Traits> chunk;
  float4 received[Traits::kReceiveSlots];  // peers' group P V sums of this CTA's granules
  float2 received_stats[Traits::kMaxGroups][Traits::kHeads];  // (max, sum) of every group
  uint64_t received_barrier;                                  // completes when every peer's bytes have landed
};

// The 64-head stream kernel's fold state and a group's fold weights, per
// head (written by thread `head`): in registers they would spill next to
// the 128-float output (docs/kernels/heads64.md). None at 16 heads.
template <int kHeads, bool kInSmem>
struct HeadFolds {
  float max[kHeads];     // FoldState
  float sum[kHeads];
  float keep[kHeads];    // FoldWeights of the group being folded
  float take[kHeads];
};
template <int kHeads>
struct HeadFolds<kHeads, false> {};

// The stream kernel: one CTA a unit (or one a dim part), groups folded in registers.
template <class Traits>
struct StreamSmem {
  ChunkSmem<Traits> chunk;
  HeadFolds<Traits::kHeads, Traits::kStreamFoldsByDimBlock> folds;
};

// The split kernel: one CTA a run of groups, without a cluster; each group's
// result goes to the workspace (SplitWorkspace).
template <class Traits>
struct SplitSmem {
  ChunkSmem<Traits> chunk;
};

// The split path's workspace (docs/kernels/split.md): for each unit and
// group c, the group's P V sum [granule][head] as 4 FP32 values in travel
// order (the cluster kernel's DSMEM slots), then all (max, sum) pairs
// [unit][group][head]. The combine kernel deals a unit's granules
// to kCombineSlices CTAs, one granule a thread.
template <class Traits>
struct SplitWorkspace {
  // 32 KiB a group at 16 heads, 128 KiB at 64
  static constexpr size_t kValueBytes = size_t{Traits::kGranules} * Traits::kHeads * 16;
  static constexpr size_t kStatsBytes = size_t{Traits::kHeads} * 8;
  static constexpr size_t kAlignment = 16;
  static constexpr int64_t kRecordBytes = kValueBytes + kStatsBytes;  // one group of one unit
  static constexpr int kCombineSlices = Traits::kGranules / (Traits::kThreads / Traits::kHeads);
  static_assert(Traits::kGranules % (Traits::kThreads / Traits::kHeads) == 0,
                "a combine CTA: kThreads / kHeads granules x kHeads heads (16 x 16, or 4 x 64)");
  // Calls of at most kFewUnits units spread each unit over more CTAs of 4
  // granules (16 heads: 32 CTAs of 64 threads instead of 8 of 256): fewer
  // bytes a CTA pulls from L2 (measured at T = 1: W = 640 6.75 -> 6.58 µs,
  // W = 2176 11.93 -> 11.54). At 64 heads that is kCombineSlices.
  static constexpr int kFewUnits = 2;
  static constexpr int kFewUnitsSlices = Traits::kGranules / 4;
  static_assert(kFewUnitsSlices >= kCombineSlices, "a few units' combine has at least the usual CTAs");
};

}  // namespace sparse_decode::dsv4
