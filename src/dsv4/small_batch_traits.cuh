// Compile-time configuration and shared-memory plan of the small-batch
// cluster kernel. The design and its measurements: docs/kernels/small_batch.md.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

template <int kHeads_>
struct SmallBatchTraits {
  static constexpr int kHeads = kHeads_;
  static constexpr int kChunkColumns = 64;  // KV rows a CTA gathers and scores at once
  static constexpr int kWarps = 8;  // 2 warps a scheduler: one warp's latency chain hides the other's
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowBytes = kHeadDim;  // one FP8 row
  // KV and Q tiles are stored as wgmma's K-major core matrices (8 rows x 16
  // bytes, 128 contiguous bytes): [row group][16-byte piece][row % 8][16].
  static constexpr int kPieces = kRowBytes / 16;          // 16-byte pieces of a row
  static constexpr int kCoreBytes = 8 * 16;               // one core matrix
  static constexpr int kRowGroupBytes = kPieces * kCoreBytes;
  static constexpr int kWarpgroups = kWarps / 4;
  static constexpr int kGatherRowsPerWarp = kChunkColumns / kWarps;
  static constexpr int kPiecesPerWarpgroup = kPieces / kWarpgroups;  // S = K Q^T: dims split over warpgroups
  static constexpr int kDimsPerWarp = kHeadDim / kWarps;             // O = P V: dims split over warps
  static constexpr int kScoreRowFloats = kChunkColumns + 4;  // +4: the wgmma fragment stores spread over banks
  static constexpr int kProbRowHalves = kChunkColumns + 8;   // +8: ldmatrix rows on distinct banks
  static constexpr int kMaxClusterCtas = 16;                 // non-portable cluster size limit on Hopper
  // The partial output travels in granules of 4 dims (one float4 of a thread's
  // P V fragment); granule g belongs to CTA g % n of the n in the cluster.
  static constexpr int kGranuleDims = 4;
  static constexpr int kGranules = kHeadDim / kGranuleDims;
  static constexpr int granules_per_owner(int ctas) { return (kGranules + ctas - 1) / ctas; }
  // Receive slots [source CTA][owned granule][head] (4 FP16 values each), for the worst n.
  static constexpr int max_receive_slots() {
    int most = 0;
    for (int n = 1; n <= kMaxClusterCtas; ++n) most = most > n * granules_per_owner(n) ? most : n * granules_per_owner(n);
    return most * kHeads;
  }
  static constexpr int kReceiveSlots = max_receive_slots();

  static_assert(kHeads == 16, "mma.sync has M = 16: one query head a row");
  static_assert(kGatherRowsPerWarp == 8, "a warp gathers one row group (8 rows) of the tile");
  static_assert(kChunkColumns == 64, "S^T = K Q^T is one wgmma M = 64 a chunk");
  static_assert(kWarps % 4 == 0 && kPiecesPerWarpgroup % 2 == 0, "a warpgroup's dims are whole k32 steps");
  static_assert(kDimsPerWarp % 32 == 0, "P V walks 32-dim groups (one ldmatrix.x4.trans each)");
  static_assert(kChunkColumns % 16 == 0, "P V steps over 16 columns (k of m16n8k16)");
  static_assert(kThreads == kHeads * 16 && kChunkColumns == 64, "softmax: 16 threads a head, 4 columns each");
  static_assert(kThreads % kHeads == 0, "reduction: a thread serves one head");
  static_assert(kDimsPerWarp % (4 * kGranuleDims) == 0, "a thread's P V fragment is 4 consecutive dims");
};

template <class Traits>
struct SmallBatchSmem {
  static constexpr int kHeads = Traits::kHeads;
  uint8_t kv[Traits::kChunkColumns / 8][Traits::kPieces][8][16];  // gathered rows: K and V
  uint2 received[Traits::kReceiveSlots];  // peers' partial O granules, FP16 (own buffer: no wait for the KV tile)
  uint8_t q[kHeads / 8][Traits::kPieces][8][16];
  float scores[Traits::kWarpgroups][kHeads][Traits::kScoreRowFloats];  // each warpgroup's share of Q K^T
  uint16_t probs[kHeads][Traits::kProbRowHalves];     // FP16 bits of exp2(score - running max)
  float2 received_stats[Traits::kMaxClusterCtas][kHeads];  // (running max, running sum) of every CTA
  uint64_t received_barrier;                          // completes when every peer's bytes have landed
  float running_max[kHeads];                          // log2 domain, over this CTA's columns
  float running_sum[kHeads];                          // sum of the FP16-rounded probabilities
  float rescale[kHeads];                              // factor on O when the running max moves
  float sink_log2[kHeads];                            // sink * log2(e), -inf without sinks
  int32_t request;                                    // the token's request (varlen seq_lens), -1 if none
  alignas(8) uint8_t column_mask[Traits::kWarps];     // active columns of the chunk, 8 a warp
};

}  // namespace sparse_decode::dsv4
