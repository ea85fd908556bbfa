// Compile-time configuration of the packed cluster kernel (one thread-block
// cluster a unit, BF16 mma.sync on dequantized rows). Its shared-memory plan:
// cluster_smem.cuh. The design: docs/kernels/packed.md.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4_packed {

// The cluster's exchange moves 4 dims (a granule) of a head at a time;
// granule g of the 128 belongs to CTA g % n of the n in a cluster.
// The most granules an owner of a cluster of `ctas` holds.
constexpr int max_owned_granules(int ctas) { return (kHeadDim / 4 + ctas - 1) / ctas; }
// The most granule slots a CTA receives over cluster sizes 1 .. max_ctas.
constexpr int max_receive_slots(int max_ctas) {
  int most = 0;
  for (int n = 1; n <= max_ctas; ++n) most = most > n * max_owned_granules(n) ? most : n * max_owned_granules(n);
  return most;
}

struct ClusterTraits {
  static constexpr int kHeads = 16;         // heads a CTA: the M of mma.sync m16n8k16
  static constexpr int kChunkColumns = 64;  // KV rows a CTA gathers, dequantizes and scores at once
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMaxClusterCtas = 16;  // non-portable cluster size limit on Hopper
  // BF16 rows of the dequantized KV tile and of q: 512 dims + 8 so that the
  // 8 rows of an ldmatrix fall on distinct banks (1040 bytes = 65 x 16).
  static constexpr int kTileStride = kHeadDim + 8;
  static constexpr int kFp8Pieces = kPackedFp8Dims / 16;                   // 16-byte copies of a row's FP8 bytes
  static constexpr int kTailPieces = (kPackedDataBytes - kPackedFp8Dims) / 16;  // and of its BF16 dims
  static constexpr int kRowPieces = kFp8Pieces + kTailPieces;
  static constexpr int kGatherRowsPerWarp = kChunkColumns / kWarps;
  static constexpr int kDequantizeStepsPerRow = kPackedFp8Dims / 8;  // dequantization: 8 FP8 bytes a step
  static constexpr int kColumnsPerWarp = kChunkColumns / kWarps;  // S = Q K^T: one n8 tile a warp
  static constexpr int kDimsPerWarp = kHeadDim / kWarps;          // O = P V: 64 dims a warp
  static constexpr int kProbStride = kChunkColumns + 8;  // ldmatrix rows on distinct banks
  static constexpr int kGranules = kHeadDim / 4;
  static constexpr int granules_per_owner(int ctas) { return max_owned_granules(ctas); }
  // Receive slots [source CTA][owned granule][head] (4 floats each), for the worst cluster size.
  static constexpr int kReceiveSlots = max_receive_slots(kMaxClusterCtas) * kHeads;

  static_assert(kGatherRowsPerWarp == 8, "lanes 0..7 of a warp load the indices of its 8 rows");
  static_assert(kColumnsPerWarp == 8, "S: a warp computes one n8 tile over all 512 dims");
  static_assert(kDimsPerWarp == 64, "P V: a warp owns 8 n8 tiles of dims");
  static_assert(kMaxClusterCtas <= 2 * kWarps, "statistics: warp w sends to CTAs w and w + kWarps");
  static_assert(kPackedFp8Dims % 16 == 0 && kPackedDataBytes % 16 == 0, "rows copy as whole 16-byte pieces");
  static_assert(kThreads * 4 * 8 == kHeads * kHeadDim, "q: four 16-byte copies a thread");
  static_assert(kPackedTileDims % 8 == 0, "a dequantization step stays in one scale tile");
};

}  // namespace sparse_decode::dsv4_packed
