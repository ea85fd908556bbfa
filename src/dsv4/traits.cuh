// The compile-time shape of a dsv4 kernel (dsv4_decode on plain FP8 E4M3 or
// BF16 rows), derived from one named configuration (configs.cuh). The words
// of the dsv4 code, one meaning each:
//   token       one query token; T tokens a call.
//   column      one entry of a token's index row (W columns), active or not.
//   chunk       64 consecutive columns of a token, gathered into one KV tile
//               and scored at once.
//   group       a column group: a run of chunks_per_group chunks whose
//               softmax statistics and P V sum are folded into the output in
//               group order (at most 16 a token).
//   head group  the kHeads (16 or 64) query heads a CTA serves.
//   unit        a (token, head group) pair, the work unit of the kernels.
//   dim part    a unit CTA's share of the output dims (kDimParts CTAs a unit).
//   dim block   32 output dims of a warp in P V.
//   KV tile     shared-memory rows of one chunk; head tile: the 16 heads of
//               one mma.sync (M = 16).
//   granule     4 output dims of one head, the unit of the partial-output
//               exchange (cluster DSMEM, split workspace, combine).
//   slice       a combine CTA's share of a unit's granules.
#pragma once

#include <cstddef>

#include "sparse_decode/types.h"

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

// Config: a struct of static constexpr kHeads, kDType, kKvTiles,
// kProducerWarps, kDimParts and kPvWarps (configs.cuh says what each means).
// kGeneralForm: the kernel's general form, which serves what the plain form
// leaves out (request views, a lens stride, lse with the sink: params.h);
// the plain form keeps the instructions of the calls without them.
// kPageWalkForm: the general form whose columns come from HCA metadata
// (swa_rows, block_table pages; steps/column_source.cuh) instead of indices.
template <class ConfigT, bool kGeneralForm = false, bool kPageWalkForm = false>
struct Dsv4Traits {
  using Config = ConfigT;
  static constexpr bool kGeneral = kGeneralForm;
  static constexpr bool kPageWalk = kPageWalkForm;
  static constexpr int kHeads = Config::kHeads;  // query heads a CTA: 16 or 64 (one gathered KV tile serves them all)
  static constexpr int kHeadTiles = kHeads / 16;  // P V: mma.sync tiles of 16 heads (M = 16)
  static constexpr DType kDType = Config::kDType;
  static constexpr bool kBf16 = kDType == DType::kBFloat16;
  static constexpr int kElementBytes = kBf16 ? 2 : 1;
  static constexpr int kKvTiles = Config::kKvTiles;
  static constexpr int kDimParts = Config::kDimParts;
  static constexpr int kChunkColumns = 64;  // KV rows gathered and scored at once
  static constexpr int kWarps = 8;  // math warps: 2 a scheduler, one warp's latency chain hides the other's
  static constexpr int kThreads = kWarps * 32;  // math threads (threadIdx.x < kThreads): all steps, or Q K^T and softmax
  // With P V warps: threads kThreads.. kThreads + kPvThreads - 1, then the producers.
  static constexpr int kPvWarps = Config::kPvWarps;
  static constexpr int kPvThreads = kPvWarps * 32;
  static constexpr int kProducerWarps = Config::kProducerWarps;
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
  static constexpr int kTileFreeBarrier = 2;  // + KV tile
  // The threads of a KV tile's release: the warps that read it last, and the producers.
  static constexpr int kTileFreeThreads = (kPvWarps > 0 ? kPvThreads : kThreads) + 32 * kProducerWarps;
  // With P V warps, per chunk slot: the scoring warps arrive when its
  // probabilities are written (P V warps wait), the P V warps when done reading them.
  static constexpr int kProbsReadyBarrier = kTileFreeBarrier + kKvTiles;  // + slot
  static constexpr int kProbsFreeBarrier = kProbsReadyBarrier + kChunkSlots;  // + slot
  static constexpr int kSlotHandoffThreads = kThreads + kPvThreads;
  static constexpr int kRowBytes = kHeadDim * kElementBytes;  // FP8: 512, BF16: 1024
  // The Q tile is stored as wgmma's K-major core matrices (8 rows x 16
  // bytes, 128 contiguous bytes): [8-row slab][16-byte piece][row % 8][16].
  static constexpr int kPieces = kRowBytes / 16;          // 16-byte pieces of a row
  static constexpr int kCoreBytes = 8 * 16;               // one core matrix
  static constexpr int kSlabBytes = kPieces * kCoreBytes;  // 8 rows of the Q tile
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
  // at 16 FP8 heads with producers and two KV tiles (104 registers a math
  // thread at 2 CTAs an SM: 4 live sets spill 192 bytes, 2 spill 44, and
  // measured faster; the deep stream kernel, at 1 CTA an SM, has 232).
  static constexpr bool kFewRegisters = kHeads > 16 || (kProducerWarps > 0 && !kBf16 && kKvTiles == 2);
  static constexpr int kLiveScoreSets = kFewRegisters ? 2 : kScoreSets;
  // Softmax: kSoftmaxThreads threads a head, kSoftmaxColumns columns each
  // (16 x 4 at 16 heads, 4 x 16 at 64).
  static constexpr int kSoftmaxThreads = kWarps * 32 / kHeads;
  static constexpr int kSoftmaxColumns = kChunkColumns / kSoftmaxThreads;
  // The 64-head stream kernel cannot hold a group's P V fragment next to the
  // folded output (2 x 128 floats a thread): it folds each chunk's P V a dim
  // block at a time, which needs groups of one chunk (docs/kernels/heads64.md).
  static constexpr bool kStreamFoldsByDimBlock = kHeads > 16;
  // P for P V: FP16 with FP8 rows (the E4M3 V converts exactly to FP16); with
  // BF16 rows, BF16 hi + lo parts (16 significant bits: BF16 P alone loses
  // the accuracy bound, docs/kernels/bf16.md).
  static constexpr int kProbParts = kBf16 ? 2 : 1;
  static constexpr int kDimsPerWarp = kHeadDim / kWarps;             // O = P V: dims split over warps
  static constexpr int kDimBlocks = kDimsPerWarp / 32;               // a warp's dim blocks (one ldmatrix.x4.trans each)
  static constexpr int kOutputDimBlocks = kDimBlocks / kDimParts;    // the dim blocks a warp of this CTA outputs
  // Each gathered row is one bulk copy (TMA) into a row-major KV tile, rows
  // padded by 16 bytes (8 rows of an ldmatrix on distinct banks); Q K^T
  // takes K from registers (docs/kernels/large_batch.md).
  static constexpr int kTileRowBytes = kRowBytes + 16;
  // Bytes between 16-row blocks and between 16-byte pieces of a row in the KV tile.
  static constexpr int kTileRows16Bytes = 16 * kTileRowBytes;
  static constexpr int kTilePieceBytes = 16;
  // Rows a gathering warp's lanes copy at the top of a chunk; the rest after
  // the scores. Measured: 64 heads gain from splitting the copy issue (and
  // spill less), 16 heads lose 2.5 %.
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

  static_assert(!kPageWalk || (kGeneral && !kBf16),
                "the page walk serves HCA calls: FP8 rows, tokens addressed as the general form does");
  static_assert(kHeads == 16 || kHeads == 64,
                "P V: mma.sync has M = 16 (one head a row, kHeads / 16 tiles); Q K^T: wgmma N = kHeads (16 or 64)");
  static_assert(kHeads == 16 || !kBf16,
                "BF16 at 64 heads is not served: two BF16 KV tiles + Q exceed 227 KiB (docs/kernels/heads64.md)");
  static_assert(kLiveScoreSets == kScoreSets || (kLiveScoreSets >= 2 && kLiveScoreSets < kScoreSets),
                "score_chunk: the first batch fills every live set, later batches refill sets 1..");
  static_assert(kDType == DType::kFloat8E4M3 || kDType == DType::kBFloat16, "the kernels read FP8 E4M3 or BF16 rows");
  static_assert(kKvTiles == 1 || kKvTiles == 2 || (kKvTiles <= 4 && kProducerWarps > 0),
                "walk_chunks double-buffers or waits for its one KV tile; deeper pipelines need producers");
  static_assert(kRowBytes % 16 == 0 && kPieces % 4 == 0, "a gather lane copies every 4th 16-byte piece of its row");
  static_assert(kScoreSteps % kStepsPerAccumulator == 0, "score accumulators take equal runs of k-steps");
  static_assert(kGatherRowsPerWarp == 8, "a warp gathers 8 rows of the KV tile");
  static_assert(kChunkColumns == 64, "S^T = K Q^T is one wgmma M = 64 a chunk");
  static_assert(kWarps % 4 == 0 && kPiecesPerWarpgroup % 2 == 0, "a warpgroup's dims are whole 32-byte k-steps");
  static_assert(kDimsPerWarp % 32 == 0, "P V walks 32-dim blocks (one ldmatrix.x4.trans each)");
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
  static_assert(kProducerWarps == 0 || (kProducerWarps == 4 && kKvTiles >= 2),
                "producers: one warpgroup (setmaxnreg moves registers a warpgroup at a time), KV tiles to fill ahead");
  static_assert(kProducerWarps == 0 || kTileFreeBarrier + kKvTiles <= 16, "a CTA has 16 hardware barriers");
  static_assert(kProducerRows <= 32 && kProducerRows % 8 == 0,
                "a producer lane copies one row; its warp's rows are whole bytes of column_mask");
  static_assert(kDimParts == 1 || (kDimParts == 2 && kProducerWarps > 0),
                "dim parts: the stream kernels (with a producer warpgroup)");
  static_assert(kDimBlocks % kDimParts == 0, "a dim part is whole dim blocks of every warp");
  static_assert(kPvWarps == 0 || (kPvWarps == kWarps && kProducerWarps == 4 && kDimParts == 1 && kHeads == 16),
                "P V warps: the 16-head P V of all dims on a second set of kWarps warps, rows from producers");
  static_assert(kProbsFreeBarrier + kChunkSlots <= 16, "a CTA has 16 hardware barriers");
};

}  // namespace sparse_decode::dsv4
