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
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowBytes = kHeadDim;            // one FP8 row
  static constexpr int kSmemRowBytes = kRowBytes + 16;  // +16 B: the 8 rows of an ldmatrix hit distinct banks
  static constexpr int kGatherRowsPerWarp = kChunkColumns / kWarps;
  static constexpr int kScoreColumnsPerWarp = kChunkColumns / kWarps;  // S = Q K^T: columns split over warps
  static constexpr int kDimsPerWarp = kHeadDim / kWarps;               // O = P V: dims split over warps
  static constexpr int kScoreRowFloats = kChunkColumns + 8;  // +8: float2 stores of a half-warp hit distinct banks
  static constexpr int kProbRowHalves = kChunkColumns + 8;   // +8: ldmatrix rows on distinct banks
  static constexpr int kMaxClusterCtas = 16;                 // non-portable cluster size limit on Hopper
  // The partial output travels in granules of 4 dims (one float4 of a thread's
  // P V fragment); granule g belongs to CTA g % n of the n in the cluster.
  static constexpr int kGranuleDims = 4;
  static constexpr int kGranules = kHeadDim / kGranuleDims;
  static constexpr int granules_per_owner(int ctas) { return (kGranules + ctas - 1) / ctas; }
  // Receive slots [source CTA][owned granule][head] of float4, for the worst n.
  static constexpr int max_receive_slots() {
    int most = 0;
    for (int n = 1; n <= kMaxClusterCtas; ++n) most = most > n * granules_per_owner(n) ? most : n * granules_per_owner(n);
    return most * kHeads;
  }
  static constexpr int kReceiveSlots = max_receive_slots();

  static_assert(kHeads == 16, "mma.sync has M = 16: one query head a row");
  static_assert(kGatherRowsPerWarp == 16, "a warp's lanes 0..15 hold one row index each");
  static_assert(kRowBytes == 32 * 16, "a gathered row is one 16-byte piece a lane");
  static_assert(kScoreColumnsPerWarp == 16, "a warp scores two n8 tiles of columns");
  static_assert(kDimsPerWarp % 32 == 0, "P V walks 32-dim groups (one ldmatrix.x4.trans each)");
  static_assert(kChunkColumns % 16 == 0, "P V steps over 16 columns (k of m16n8k16)");
  static_assert(kThreads == kHeads * 8, "softmax: 8 threads a head, 8 columns each");
  static_assert(kDimsPerWarp % (4 * kGranuleDims) == 0, "a thread's P V fragment is 4 consecutive dims");
};

template <class Traits>
struct SmallBatchSmem {
  static constexpr int kHeads = Traits::kHeads;
  union {
    uint8_t kv[Traits::kChunkColumns][Traits::kSmemRowBytes];  // gathered rows: K and V
    float4 received[Traits::kReceiveSlots];                   // peers' partial O granules (after P V)
  };
  uint8_t q[kHeads][Traits::kSmemRowBytes];
  float scores[kHeads][Traits::kScoreRowFloats];      // log2-domain scores of the chunk
  uint16_t probs[kHeads][Traits::kProbRowHalves];     // FP16 bits of exp2(score - running max)
  float2 received_stats[Traits::kMaxClusterCtas][kHeads];  // (running max, running sum) of every CTA
  uint64_t received_barrier;                          // completes when every peer's bytes have landed
  float running_max[kHeads];                          // log2 domain, over this CTA's columns
  float running_sum[kHeads];                          // sum of the FP16-rounded probabilities
  float rescale[kHeads];                              // factor on O when the running max moves
  float sink_log2[kHeads];                            // sink * log2(e), -inf without sinks
  uint16_t column_mask[Traits::kWarps];               // active columns of the chunk, 16 a warp
};

}  // namespace sparse_decode::dsv4
