// Compile-time configuration and shared-memory plan of the packed-row
// kernel. The design and its measurements: docs/kernels/packed.md.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4 {

struct PackedTraits {
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
  static constexpr int kScoreStride = kChunkColumns + 4;
  static constexpr int kProbStride = kChunkColumns + 8;  // ldmatrix rows on distinct banks
  static constexpr int kPartialStride = kHeadDim + 8;    // float2 stores of a half-warp on distinct banks
  static constexpr int kGranules = kHeadDim / 4;         // the reduction writes 4 dims (8 bytes) at a time

  static_assert(kGatherRowsPerWarp == 8, "lanes 0..7 of a warp load the indices of its 8 rows");
  static_assert(kColumnsPerWarp == 8, "S: a warp computes one n8 tile over all 512 dims");
  static_assert(kDimsPerWarp == 64, "P V: a warp owns 8 n8 tiles of dims");
  static_assert(kThreads == kHeads * 16 && kChunkColumns == 64, "softmax: 16 threads a head, 4 columns each");
  static_assert(kPackedFp8Dims % 16 == 0 && kPackedDataBytes % 16 == 0, "rows copy as whole 16-byte pieces");
  static_assert(kThreads * 4 * 8 == kHeads * kHeadDim, "q: four 16-byte copies a thread");
  static_assert(kPackedTileDims % 8 == 0, "a dequantization step stays in one scale tile");
};

// Shared memory of one CTA; sizeof() is the dynamic shared memory of the launch.
struct PackedSmem {
  using T = PackedTraits;
  union {
    uint16_t kv[T::kChunkColumns][T::kTileStride];  // dequantized rows, BF16: K and V
    float partial[T::kHeads][T::kPartialStride];    // after the last chunk: this CTA's unnormalized O
  };
  union {
    struct {
      uint8_t fp8[T::kChunkColumns][kPackedFp8Dims];   // the rows' FP8 bytes as gathered
      uint8_t scales[T::kChunkColumns][kPackedScaleBytes];
    } raw;
    struct {  // live only after the raw bytes are dequantized
      float scores[T::kHeads][T::kScoreStride];
      // exp2(score - running max) as the sum of two BF16 values (16 significant bits)
      uint16_t probs_hi[T::kHeads][T::kProbStride];
      uint16_t probs_lo[T::kHeads][T::kProbStride];
    } soft;
  };
  uint16_t q[T::kHeads][T::kTileStride];
  float running_max[T::kHeads];  // log2 domain, over this CTA's columns
  float running_sum[T::kHeads];  // sum of the probabilities
  float rescale[T::kHeads];      // factor on O when the running max moves
  alignas(8) uint8_t column_mask[T::kWarps];  // active columns of the chunk, 8 a warp
};

static_assert(sizeof(PackedSmem::partial) <= sizeof(PackedSmem::kv), "the partial O reuses the KV tile");
static_assert(sizeof(PackedSmem) <= 113 * 1024, "two CTAs an SM");

}  // namespace sparse_decode::dsv4
