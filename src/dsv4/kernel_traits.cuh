// Compile-time configuration and shared-memory plans of the dsv4 kernels:
// the cluster kernel (small batches) and the stream kernel (large batches).
// The designs and their measurements: docs/kernels/small_batch.md and
// docs/kernels/large_batch.md.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

template <int kHeads_>
struct Dsv4Traits {
  static constexpr int kHeads = kHeads_;
  static constexpr int kChunkColumns = 64;  // KV rows gathered and scored at once
  static constexpr int kWarps = 8;  // 2 warps a scheduler: one warp's latency chain hides the other's
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowBytes = kHeadDim;  // one FP8 row
  static constexpr int kBuffers = 2;          // KV tiles: the next chunk's gather lands during this one's math
  // KV and Q tiles are stored as wgmma's K-major core matrices (8 rows x 16
  // bytes, 128 contiguous bytes): [row group][16-byte piece][row % 8][16].
  static constexpr int kPieces = kRowBytes / 16;          // 16-byte pieces of a row
  static constexpr int kCoreBytes = 8 * 16;               // one core matrix
  static constexpr int kRowGroupBytes = kPieces * kCoreBytes;
  static constexpr int kWarpgroups = kWarps / 4;
  static constexpr int kGatherRowsPerWarp = kChunkColumns / kWarps;
  static constexpr int kPiecesPerWarpgroup = kPieces / kWarpgroups;  // S = K Q^T: dims split over warpgroups
  static constexpr int kDimsPerWarp = kHeadDim / kWarps;             // O = P V: dims split over warps
  static constexpr int kDimGroups = kDimsPerWarp / 32;               // ldmatrix.x4.trans groups of a warp
  static constexpr int kScoreRowFloats = kChunkColumns + 4;  // +4: the wgmma fragment stores spread over banks
  static constexpr int kProbRowHalves = kChunkColumns + 8;   // +8: ldmatrix rows on distinct banks
  // A token's chunks form at most 16 groups of equal length; each group's
  // softmax statistics and mean output are folded into the token's output
  // in group order, by every kernel alike (batch invariance).
  static constexpr int kMaxGroups = 16;  // also the non-portable cluster size limit on Hopper
  // The partial output travels in granules of 4 dims (one float4 of a thread's
  // P V fragment); granule g belongs to CTA g % n of the n in the cluster.
  static constexpr int kGranuleDims = 4;
  static constexpr int kGranules = kHeadDim / kGranuleDims;
  static constexpr int granules_per_owner(int ctas) { return (kGranules + ctas - 1) / ctas; }
  // Receive slots [source CTA][owned granule][head] (4 FP16 values each), for the worst n.
  static constexpr int max_receive_slots() {
    int most = 0;
    for (int n = 1; n <= kMaxGroups; ++n) most = most > n * granules_per_owner(n) ? most : n * granules_per_owner(n);
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

// A thread's share of a group's P V: [dim group][16-dim half][even/odd n-tile][top head x2, bottom head x2].
template <class Traits>
using OutputFragment = float[Traits::kDimGroups][2][2][4];

// What both kernels keep per chunk.
template <class Traits>
struct ChunkSmem {
  static constexpr int kHeads = Traits::kHeads;
  uint8_t kv[Traits::kBuffers][Traits::kChunkColumns / 8][Traits::kPieces][8][16];  // gathered rows: K and V
  uint8_t q[kHeads / 8][Traits::kPieces][8][16];
  float scores[Traits::kWarpgroups][kHeads][Traits::kScoreRowFloats];  // each warpgroup's share of Q K^T
  uint16_t probs[kHeads][Traits::kProbRowHalves];     // FP16 bits of exp2(score - running max)
  float running_max[kHeads];                          // log2 domain, over the group's columns so far
  float running_sum[kHeads];                          // sum of the FP16-rounded probabilities
  float rescale[kHeads];                              // factor on O when the running max moves
  float sink_log2[kHeads];                            // sink * log2(e), -inf without sinks
  int32_t staged_index[Traits::kBuffers][Traits::kChunkColumns];  // the next chunk's indices, copied with this one's rows
  int32_t request;                                    // the token's request (varlen seq_lens), -1 if none
  alignas(8) uint8_t column_mask[Traits::kBuffers][Traits::kWarps];  // active columns of a tile, 8 a warp
};

// The cluster kernel: one CTA a group, groups exchanged through DSMEM.
template <class Traits>
struct ClusterSmem {
  ChunkSmem<Traits> chunk;
  uint2 received[Traits::kReceiveSlots];  // peers' group means of this CTA's granules, FP16
  float2 received_stats[Traits::kMaxGroups][Traits::kHeads];  // (max, sum) of every group
  uint64_t received_barrier;                                  // completes when every peer's bytes have landed
};

// The stream kernel: one CTA a token, groups folded in registers.
template <class Traits>
struct StreamSmem {
  ChunkSmem<Traits> chunk;
};

}  // namespace sparse_decode::dsv4
