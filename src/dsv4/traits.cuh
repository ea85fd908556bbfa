// Compile-time configuration and shared-memory plans of the dsv4 kernels:
// the cluster kernel (small batches), the stream kernel (large batches) and
// the split path, for FP8 E4M3 and BF16 q and rows, 16 heads a CTA (and 64
// for the stream kernel and the split path with FP8 rows). The designs and
// their measurements: docs/kernels/small_batch.md, docs/kernels/large_batch.md,
// docs/kernels/bf16.md, docs/kernels/heads64.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

// Shared memory of an H200 SM that CTAs can hold, and what the runtime
// reserves a CTA besides a kernel's dynamic shared memory.
inline constexpr size_t kSmemPerSm = 228 * 1024;
inline constexpr size_t kSmemReservedPerCta = 1024;
inline constexpr size_t kMaxSmemPerCta = 227 * 1024;

// CTAs of `smem_bytes` dynamic shared memory an SM holds (the kernels ask for at most 2).
constexpr int resident_ctas(size_t smem_bytes) {
  return kSmemPerSm / (smem_bytes + kSmemReservedPerCta) >= 2 ? 2 : 1;
}

// kDType: the element type of q and of the KV rows. kBuffers: KV tiles; with
// 2 the next chunk's gather lands during this one's math, with 1 the gather
// waits for the tile (a CTA of one chunk loses nothing, and a BF16 tile is 65 KiB).
// kProducerWarps: 0, the math warps issue their rows' copies themselves; 4,
// a producer warpgroup issues every copy and the math warps only wait
// (docs/kernels/large_batch.md, "Sixth session").
// kDimParts: CTAs that share a (token, head group), each computing all of
// its scores but P V for 1 / kDimParts of the dims (2: the stream
// kernels when the units fill at most half the SMs; docs/kernels/heads64.md).
// kPvWarps: 0, the math warps take every step of a chunk in turn; 8, a
// second set of math warps runs P V and the fold of chunk i while the first
// scores chunk i + 1 (the deep stream kernel; docs/kernels/large_batch.md,
// "Eighteenth session"). Each step keeps its float operations: same bits.
template <int kHeads_, DType kDType_, int kBuffers_, int kProducerWarps_ = 0, int kDimParts_ = 1, int kPvWarps_ = 0>
struct Dsv4Traits {
  static constexpr int kHeads = kHeads_;  // query heads a CTA: 16 or 64 (one gathered tile serves them all)
  static constexpr int kHeadTiles = kHeads / 16;  // P V: mma.sync tiles of 16 heads (M = 16)
  static constexpr DType kDType = kDType_;
  static constexpr bool kBf16 = kDType == DType::kBFloat16;
  static constexpr int kElementBytes = kBf16 ? 2 : 1;
  static constexpr int kChunkColumns = 64;  // KV rows gathered and scored at once
  static constexpr int kWarps = 8;  // math warps: 2 a scheduler, one warp's latency chain hides the other's
  static constexpr int kThreads = kWarps * 32;  // math threads (threadIdx.x < kThreads): all steps, or Q K^T and softmax
  // With P V warps: threads kThreads.. kThreads + kPvThreads - 1, then the producers.
  static constexpr int kPvWarps = kPvWarps_;
  static constexpr int kPvThreads = kPvWarps * 32;
  static constexpr int kProducerWarps = kProducerWarps_;
  static constexpr int kFirstProducerWarp = kWarps + kPvWarps;
  static constexpr int kLaunchThreads = kThreads + kPvThreads + 32 * kProducerWarps;
  // Scores, probabilities and softmax statistics of a chunk: double-buffered
  // when P V warps read chunk i's while the scoring warps write chunk i + 1's.
  static constexpr int kChunkSlots = kPvWarps > 0 ? 2 : 1;
  // Rows of a chunk each producer warp copies (one lane a row).
  static constexpr int kProducerRows = kProducerWarps == 4 ? kChunkColumns / 4 : 0;  // 0 or 4 warps (below)
  // Hardware barriers besides __syncthreads' 0: the math warps' own
  // (math_sync), and with producers one a KV tile: the math warps arrive
  // when done reading the tile, the producers wait there before refilling it.
  static constexpr int kMathBarrier = 1;
  static constexpr int kTileFreeBarrier = 2;  // + tile
  // The threads of a tile's release: the warps that read it last, and the producers.
  static constexpr int kTileFreeThreads = (kPvWarps > 0 ? kPvThreads : kThreads) + 32 * kProducerWarps;
  // With P V warps, per chunk slot: the scoring warps arrive when its
  // probabilities are written (P V warps wait), the P V warps when done reading them.
  static constexpr int kProbsReadyBarrier = kTileFreeBarrier + kBuffers_;  // + slot
  static constexpr int kProbsFreeBarrier = kProbsReadyBarrier + kChunkSlots;  // + slot
  static constexpr int kSlotHandoffThreads = kThreads + kPvThreads;
  static constexpr int kRowBytes = kHeadDim * kElementBytes;  // FP8: 512, BF16: 1024
  static constexpr int kBuffers = kBuffers_;
  // The Q tile is stored as wgmma's K-major core matrices (8 rows x 16
  // bytes, 128 contiguous bytes): [row group][16-byte piece][row % 8][16].
  static constexpr int kPieces = kRowBytes / 16;          // 16-byte pieces of a row
  static constexpr int kCoreBytes = 8 * 16;               // one core matrix
  static constexpr int kRowGroupBytes = kPieces * kCoreBytes;
  static constexpr int kWarpgroups = kWarps / 4;
  static constexpr int kGatherRowsPerWarp = kChunkColumns / kWarps;
  static constexpr int kPiecesPerWarpgroup = kPieces / kWarpgroups;  // S = K Q^T: dims split over warpgroups
  // A wgmma k-step reads 32 bytes of a row (2 pieces): k32 for FP8, k16 for BF16.
  static constexpr int kScoreSteps = kPiecesPerWarpgroup / 2;
  // FP8 wgmma accumulates with reduced precision: each pair of k-steps gets its
  // own accumulator, summed in FP32. BF16 wgmma accumulates in FP32: one accumulator.
  static constexpr int kStepsPerAccumulator = kBf16 ? kScoreSteps : 2;
  static constexpr int kScoreSets = kScoreSteps / kStepsPerAccumulator;
  // Accumulator sets live at once (kHeads / 2 floats each): all at 16 heads;
  // 2 at 64 heads (32 floats a set), next to the 128-float P V fragment, and
  // at 16 FP8 heads with producers (104 registers a math thread at 2 CTAs an
  // SM: 4 live sets spill 192 bytes, 2 spill 44, and measured faster; the
  // deep stream kernel, at 1 CTA an SM, has 232).
  static constexpr bool kFewRegisters = kHeads > 16 || (kProducerWarps_ > 0 && !kBf16 && kBuffers_ == 2);
  static constexpr int kLiveScoreSets = kFewRegisters ? 2 : kScoreSets;
  // Softmax: kSoftmaxThreads threads a head, kSoftmaxColumns columns each
  // (16 x 4 at 16 heads, 4 x 16 at 64).
  static constexpr int kSoftmaxThreads = kWarps * 32 / kHeads;
  static constexpr int kSoftmaxColumns = kChunkColumns / kSoftmaxThreads;
  // The 64-head stream kernel cannot hold a group's P V fragment next to the
  // folded output (2 x 128 floats a thread): it folds each chunk's P V a dim
  // group at a time, which needs groups of one chunk (docs/kernels/heads64.md).
  static constexpr bool kStreamFoldsByDimGroup = kHeads > 16;
  // P for P V: FP16 with FP8 rows (the E4M3 V converts exactly to FP16); with
  // BF16 rows, BF16 hi + lo parts (16 significant bits: BF16 P alone loses
  // the accuracy bound, docs/kernels/packed.md).
  static constexpr int kProbParts = kBf16 ? 2 : 1;
  static constexpr int kDimsPerWarp = kHeadDim / kWarps;             // O = P V: dims split over warps
  static constexpr int kDimGroups = kDimsPerWarp / 32;               // ldmatrix.x4.trans groups of a warp
  static constexpr int kDimParts = kDimParts_;
  static constexpr int kOutputDimGroups = kDimGroups / kDimParts;    // the dim groups a warp of this CTA outputs
  // Each gathered row is one bulk copy (TMA) into a row-major KV tile, rows
  // padded by 16 bytes (8 rows of an ldmatrix on distinct banks); Q K^T
  // takes K from registers (docs/kernels/large_batch.md, "Fifth session").
  static constexpr int kTileRowBytes = kRowBytes + 16;
  // Bytes between 16-row blocks and between 16-byte pieces of a row in the KV tile.
  static constexpr int kTileRows16Bytes = 16 * kTileRowBytes;
  static constexpr int kTilePieceBytes = 16;
  // Rows a gather lane group copies at the top of a chunk; the rest after the
  // scores. Measured (large_batch.md): 64 heads gain from splitting the copy
  // issue (and spill less), 16 heads lose 2.5 %.
  static constexpr int kGatherIssueNow = kHeads == 16 ? kChunkColumns / kWarps : kChunkColumns / kWarps / 2;
  // Q K^T from registers: k-steps whose K fragments are loaded before one wgmma batch.
  static constexpr int kScoreBatch = 4;
  static constexpr int kScoreRowFloats = kChunkColumns + 4;  // +4: the wgmma fragment stores spread over banks
  static constexpr int kProbRowHalves = kChunkColumns + 8;   // +8: ldmatrix rows on distinct banks
  // A token's chunks form at most 16 groups of equal length; each group's
  // softmax statistics and P V sum are folded into the token's output
  // in group order, by every kernel alike (batch invariance).
  static constexpr int kMaxGroups = 16;  // also the non-portable cluster size limit on Hopper
  // The partial output travels in granules of 4 dims (one float4 of a thread's
  // P V fragment); granule g belongs to CTA g % n of the n in the cluster.
  static constexpr int kGranuleDims = 4;
  static constexpr int kGranules = kHeadDim / kGranuleDims;
  static constexpr int granules_per_owner(int ctas) { return (kGranules + ctas - 1) / ctas; }
  // Receive slots [source CTA][owned granule][head] (4 FP32 values each), for the worst n.
  static constexpr int max_receive_slots() {
    int most = 0;
    for (int n = 1; n <= kMaxGroups; ++n) most = most > n * granules_per_owner(n) ? most : n * granules_per_owner(n);
    return most * kHeads;
  }
  static constexpr int kReceiveSlots = max_receive_slots();

  static_assert(kHeads == 16 || kHeads == 64,
                "P V: mma.sync has M = 16 (one head a row, kHeads / 16 tiles); Q K^T: wgmma N = kHeads (16 or 64)");
  static_assert(kHeads == 16 || !kBf16,
                "BF16 at 64 heads is not served: two BF16 tiles + Q exceed 227 KiB (docs/kernels/heads64.md)");
  static_assert(kLiveScoreSets == kScoreSets || (kLiveScoreSets >= 2 && kLiveScoreSets < kScoreSets),
                "score_chunk: the first batch fills every live set, later batches refill sets 1..");
  static_assert(kDType == DType::kFloat8E4M3 || kDType == DType::kBFloat16, "the kernels read FP8 E4M3 or BF16 rows");
  static_assert(kBuffers == 1 || kBuffers == 2 || (kBuffers <= 4 && kProducerWarps_ > 0),
                "walk_chunks double-buffers or waits for its one tile; deeper pipelines need producers");
  static_assert(kRowBytes % 16 == 0 && kPieces % 4 == 0, "a gather lane copies every 4th 16-byte piece of its row");
  static_assert(kScoreSteps % kStepsPerAccumulator == 0, "score accumulators take equal runs of k-steps");
  static_assert(kGatherRowsPerWarp == 8, "a warp gathers one row group (8 rows) of the tile");
  static_assert(kChunkColumns == 64, "S^T = K Q^T is one wgmma M = 64 a chunk");
  static_assert(kWarps % 4 == 0 && kPiecesPerWarpgroup % 2 == 0, "a warpgroup's dims are whole 32-byte k-steps");
  static_assert(kDimsPerWarp % 32 == 0, "P V walks 32-dim groups (one ldmatrix.x4.trans each)");
  static_assert(kChunkColumns % 16 == 0, "P V steps over 16 columns (k of m16n8k16)");
  static_assert(kThreads % kHeads == 0 && kSoftmaxColumns % 4 == 0 && kSoftmaxColumns <= 32,
                "softmax: whole quads of columns a thread (store_probabilities), its mask bits within 32");
  static_assert(kSoftmaxThreads <= 32 && 32 % kSoftmaxThreads == 0, "softmax: a head's threads are lanes of one warp");
  static_assert(kThreads % kHeads == 0, "reduction: a thread serves one head");
  static_assert(kDimsPerWarp % (4 * kGranuleDims) == 0, "a thread's P V fragment is 4 dims of its two heads");
  static_assert(kPieces % (kThreads / 8) == 0, "load_query: each pass of the CTA copies 32 pieces of 8 heads");
  static_assert(kTileRowBytes % 16 == 0 && (kTileRowBytes / 4) % 32 == 4,
                "bulk rows: 16-byte aligned, consecutive rows 4 banks apart (ldmatrix without conflicts)");
  static_assert(kRowBytes % 512 == 0, "bulk rows: a warp zero-fills a masked row 512 bytes a store");
  static_assert(kScoreSteps % kScoreBatch == 0 && kScoreBatch % kStepsPerAccumulator == 0 || kBf16,
                "Q K^T from registers: whole accumulator sets a batch (FP8)");
  static_assert(kProducerWarps == 0 || (kProducerWarps == 4 && kBuffers >= 2),
                "producers: one warpgroup (setmaxnreg moves registers a warpgroup at a time), tiles to fill ahead");
  static_assert(kProducerWarps == 0 || kTileFreeBarrier + kBuffers <= 16, "a CTA has 16 hardware barriers");
  static_assert(kProducerRows <= 32 && kProducerRows % 8 == 0,
                "a producer lane copies one row; its warp's rows are whole bytes of column_mask");
  static_assert(kDimParts == 1 || (kDimParts == 2 && kProducerWarps > 0),
                "dim parts: the stream kernels (with a producer warpgroup)");
  static_assert(kDimGroups % kDimParts == 0, "a dim part is whole 32-dim groups of every warp");
  static_assert(kPvWarps == 0 || (kPvWarps == kWarps && kProducerWarps == 4 && kDimParts == 1 && kHeads == 16),
                "P V warps: the 16-head P V of all dims on a second set of kWarps warps, rows from producers");
  static_assert(kProbsFreeBarrier + kChunkSlots <= 16, "a CTA has 16 hardware barriers");
};

// Registers a thread of a kernel with a producer warpgroup holds at
// `ctas` CTAs an SM: all at launch, then (setmaxnreg) the producers give
// theirs down to kProducerRegisters and the math warps (P V warps included)
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

// A thread's share of a group's P V over kGroups of its warp's 32-dim groups:
// [16-head tile][dim group][16-dim half][even/odd n-tile][top head x2, bottom head x2];
// tile t's heads are 16t + lane / 4 (top) and 16t + lane / 4 + 8 (bottom).
template <class Traits, int kGroups>
using DimGroupFragment = float[Traits::kHeadTiles][kGroups][2][2][4];

// The warp's dims this CTA outputs: 32 floats a thread at 16 heads, 128 at
// 64 (half of that with two dim parts).
template <class Traits>
using OutputFragment = DimGroupFragment<Traits, Traits::kOutputDimGroups>;

// The next chunk's indices, copied with this chunk's rows (two KV tiles); a
// walk with one tile reads each chunk's indices when it gathers the chunk.
template <int kBuffers, int kColumns>
struct StagedIndices {
  int32_t index[kBuffers][kColumns];
};
template <int kColumns>
struct StagedIndices<1, kColumns> {};

// What both kernels keep per chunk.
// A KV tile: row-major rows padded to kTileRowBytes (one bulk copy a row).
template <class Traits>
using KvTile = uint8_t[Traits::kChunkColumns][Traits::kTileRowBytes];

template <class Traits>
struct ChunkSmem {
  static constexpr int kHeads = Traits::kHeads;
  alignas(16) KvTile<Traits> kv[Traits::kBuffers];  // gathered rows: K and V (bulk copies: 16-byte aligned rows)
  uint64_t rows_landed[Traits::kBuffers];  // bulk rows: a tile's copies completed (one arrival a copying warp)
  alignas(16) uint8_t q[kHeads / 8][Traits::kPieces][8][16];
  // The next five [chunk slot] (kChunkSlots: chunk i's in slot i % kChunkSlots).
  float scores[Traits::kChunkSlots][Traits::kWarpgroups][kHeads][Traits::kScoreRowFloats];  // each warpgroup's share of Q K^T
  // exp2(score - running max): FP16 bits (FP8 rows) or BF16 hi, lo bits (BF16 rows)
  uint16_t probs[Traits::kChunkSlots][Traits::kProbParts][kHeads][Traits::kProbRowHalves];
  float running_max[Traits::kChunkSlots][kHeads];  // log2 domain, over the group's columns so far
  float running_sum[Traits::kChunkSlots][kHeads];  // sum of the rounded probabilities that P V multiplies
  float rescale[Traits::kChunkSlots][kHeads];      // factor on O when the running max moves
  float sink_log2[kHeads];                            // sink * log2(e), -inf without sinks
  StagedIndices<Traits::kBuffers, Traits::kChunkColumns> staged;
  int32_t request;                                    // the token's request (varlen seq_lens), -1 if none
  alignas(8) uint8_t column_mask[Traits::kBuffers][Traits::kWarps];  // active columns of a tile, 8 a warp
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

// The stream kernel: one CTA a (token, head group), groups folded in registers.
template <class Traits>
struct StreamSmem {
  ChunkSmem<Traits> chunk;
  HeadFolds<Traits::kHeads, Traits::kStreamFoldsByDimGroup> folds;
};

// The split kernel: one CTA a run of groups, without a cluster; each group's
// result goes to the workspace (SplitWorkspace).
template <class Traits>
struct SplitSmem {
  ChunkSmem<Traits> chunk;
};

// The split path's workspace (docs/kernels/split.md): for each (token, head
// group) unit and group c, the group's P V sum [granule][head] as 4 FP32
// values in travel order (the cluster kernel's DSMEM slots), then all (max,
// sum) pairs [unit][group][head]. The combine kernel deals a unit's granules
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
  // bytes a CTA pulls from L2 (fifteenth session: W = 640, T = 1 6.75 ->
  // 6.58 µs, W = 2176 11.93 -> 11.54). At 64 heads that is kCombineSlices.
  static constexpr int kFewUnits = 2;
  static constexpr int kFewUnitsSlices = Traits::kGranules / 4;
  static_assert(kFewUnitsSlices >= kCombineSlices, "a few units' combine has at least the usual CTAs");
};

// The instantiations the launcher uses (cluster_*_h16.cu, stream_*_h16.cu).
// The cluster kernel holds one KV tile (a CTA has one chunk up to W = 1024)
// so that its 35 KiB of FP32 receive slots fit: FP8 at 2 CTAs an SM; BF16
// (a 65 KiB tile) at 1. The stream kernel keeps two tiles (FP8: 2 CTAs an
// SM, BF16: 1; docs/kernels/bf16.md).
using ClusterTraitsFp8 = Dsv4Traits<16, DType::kFloat8E4M3, 1>;
using StreamTraitsFp8 = Dsv4Traits<16, DType::kFloat8E4M3, 2, 4>;
using ClusterTraitsBf16 = Dsv4Traits<16, DType::kBFloat16, 1>;
using StreamTraitsBf16 = Dsv4Traits<16, DType::kBFloat16, 2, 4>;
// The split kernel: FP8 with two tiles (runs of several groups overlap the
// next chunk's gather; the math warps issue the copies), BF16 with the cluster kernel's one.
using SplitTraitsFp8 = Dsv4Traits<16, DType::kFloat8E4M3, 2>;
using SplitTraitsBf16 = ClusterTraitsBf16;
// The deep stream kernel (stream_deep_fp8_h16.cu) for calls of at most one
// unit an SM: 4 KV tiles in flight at 1 CTA an SM, so that a lone CTA's
// chunks do not wait for the row latency (docs/kernels/large_batch.md).
using StreamDeepTraitsFp8 = Dsv4Traits<16, DType::kFloat8E4M3, 4, 4>;
// The same with P V warps (stream_pv_warps_fp8_h16.cu): P V of chunk i
// beside Q K^T and the softmax of chunk i + 1.
using StreamPvWarpsTraitsFp8 = Dsv4Traits<16, DType::kFloat8E4M3, 4, 4, 1, 8>;
// 64 heads a CTA (stream_fp8_h64.cu, split_fp8_h64.cu): FP8 only, two KV
// tiles, one CTA an SM; the stream kernel with a producer warpgroup (232
// registers a math thread), the split kernel without (docs/kernels/heads64.md).
using StreamTraitsFp8H64 = Dsv4Traits<64, DType::kFloat8E4M3, 2, 4>;
using SplitTraitsFp8H64 = Dsv4Traits<64, DType::kFloat8E4M3, 2>;
// The deep, the BF16 and the 64-head stream kernels in two dim parts
// (stream_halves_*.cu): two CTAs a unit, for calls of at most one unit per two SMs.
using StreamHalvesTraitsFp8 = Dsv4Traits<16, DType::kFloat8E4M3, 4, 4, 2>;
using StreamHalvesTraitsBf16 = Dsv4Traits<16, DType::kBFloat16, 2, 4, 2>;
using StreamHalvesTraitsFp8H64 = Dsv4Traits<64, DType::kFloat8E4M3, 2, 4, 2>;

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
