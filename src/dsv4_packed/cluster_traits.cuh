// Compile-time configuration and shared-memory plan of the packed-row
// kernel. The design and its measurements: docs/kernels/packed.md.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4_packed {

// The combine moves 4 dims (a granule) of a head at a time; granule g of the
// 128 belongs to CTA g % n of the n in a cluster.
constexpr int max_owned_granules(int ctas) { return (kHeadDim / 4 + ctas - 1) / ctas; }
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
  // BF16 rows of the dequantized tile and of q: 512 dims + 8 so that the 8
  // rows of an ldmatrix fall on distinct banks (1040 bytes = 65 x 16).
  static constexpr int kTileStride = kHeadDim + 8;
  static constexpr int kFp8Pieces = kPackedFp8Dims / 16;                   // 16-byte copies of a row's FP8 bytes
  static constexpr int kTailPieces = (kPackedDataBytes - kPackedFp8Dims) / 16;  // and of its BF16 dims
  static constexpr int kRowPieces = kFp8Pieces + kTailPieces;
  static constexpr int kGatherRowsPerWarp = kChunkColumns / kWarps;
  static constexpr int kGroupsPerRow = kPackedFp8Dims / 8;  // dequantization: 8 FP8 bytes a step
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

// Shared memory of one CTA; sizeof() is the dynamic shared memory of the launch.
struct ClusterSmem {
  using T = ClusterTraits;
  union {
    uint16_t kv[T::kChunkColumns][T::kTileStride];  // dequantized rows, BF16: K and V
    float4 received[T::kReceiveSlots];  // after the last chunk: the cluster's partial O, this CTA's granules
  };
  union {
    struct {
      uint8_t fp8[T::kChunkColumns][kPackedFp8Dims];  // the rows' FP8 bytes as gathered
      uint8_t scales[T::kChunkColumns][kPackedScaleBytes];
    } raw;
    struct {  // written once every warp has dequantized its rows
      // exp2(score - max) as the sum of two BF16 values (16 significant bits)
      uint16_t hi[T::kHeads][T::kProbStride];
      uint16_t lo[T::kHeads][T::kProbStride];
    } probs;
  };
  uint16_t q[T::kHeads][T::kTileStride];
  float warp_max[T::kHeads][T::kWarps];  // each warp's score max over its 8 columns
  float warp_sum[T::kHeads][T::kWarps];  // and its sum of probabilities
  float2 received_stats[T::kMaxClusterCtas][T::kHeads];  // (max, sum) of every CTA of the cluster
  uint64_t partials_landed;  // completes once every peer's partial O and statistics for this CTA have landed
};

static_assert(sizeof(ClusterSmem::received) <= sizeof(ClusterSmem::kv), "the partial O reuses the KV tile");
static_assert(sizeof(ClusterSmem) <= 113 * 1024, "two CTAs an SM");

}  // namespace sparse_decode::dsv4_packed
