// The split kernel's shared-memory plan: sizeof(SplitSmem<kFp8>) is its
// dynamic shared memory.
#pragma once

#include <cstdint>

#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

// BF16 caches: two K/V tiles, the next tile's copies land during this one's
// math. FP8: two staging buffers of raw slots and one BF16 K/V tile that
// each tile is converted into before its math. The query passes through
// the K tile of the last buffer once (q_staging) on its way into each
// lane's registers: that buffer takes no copy (BF16) or conversion (FP8)
// before the first tile's barrier.
template <bool kFp8>
struct SplitSmem {
  using T = TileTraits;
  static constexpr int kTileBuffers = kFp8 ? 1 : 2;
  static constexpr int kProbabilityHalves = T::kKeys + 8;  // 144-byte rows: 9 x 16 B
  struct KvTile {
    uint16_t k[T::kKeys][T::kRowHalves];  // BF16 keys of the tile
    uint16_t v[T::kKeys][T::kRowHalves];  // values: BF16, or FP16 from FP8 caches
  };
  union Tiles {
    KvTile kv[kTileBuffers];
    float reduce[1][T::kHeads][T::kDims];  // the CTA's P V (each warp its dims), at the end
  } tiles;
  // The tile's P (heads x keys): BF16 hi and lo, or FP16 with FP8 caches (hi only).
  uint16_t probabilities[kFp8 ? 1 : 2][T::kHeads][kProbabilityHalves];
  alignas(16) uint8_t staging[kFp8 ? 2 : 1][kFp8 ? T::kKeys : 1][kFp8 ? kDsaSlotDim : 16];  // FP8 slots
  int32_t column_page[T::kColumnBatch];   // the page of each region column of the batch
  int32_t column_count[T::kColumnBatch];  // its visible slots (0: nothing to read)
  float warp_max[SplitKernelTraits::kWarps][T::kHeads];
  float warp_sum[SplitKernelTraits::kWarps][T::kHeads];
  float head_max[T::kHeads];  // the final maximum of each head (log2 domain)
  float head_factor[T::kHeads];  // v_scale / sum of each head (0 without a visible key)
  float head_gate[T::kHeads];    // the gate's factor of each head (one split)
  float split_lse[T::kHeads];    // the cluster fold: this split's lse of each head, read by the peers
  static_assert((kProbabilityHalves * 2 / 16) % 2 == 1,
                "an odd number of 16-byte units a P row: conflict-free ldmatrix");
};

// The direct kernel (FP8 caches): two tiles of raw slots that the MMAs read
// as they landed (K and V converted in registers), the tile's FP16
// probabilities that every warp's P V reads, and the statistics. The query
// passes through tile buffer 1 once (BF16 as copied, then FP16 in the order
// the converted K fragments take) on its way into each lane's registers:
// tile 1's copies start after those loads. 56 KB: four CTAs an SM.
struct DirectSmem {
  using T = TileTraits;
  static constexpr int kSlotBytes = kDsaSlotDim + 16;  // 400: 25 x 16 B, ldmatrix rows on distinct banks
  static constexpr int kProbabilityHalves = T::kKeys + 8;  // 144-byte rows: 9 x 16 B
  struct QStaging {
    uint8_t tile0[T::kKeys][kSlotBytes];               // tile buffer 0, in use
    alignas(16) uint16_t raw[T::kHeads][T::kDims];     // BF16 q as copied (rows past `heads`: zeros)
    uint16_t f16[T::kHeads][T::kRowHalves];            // FP16 q * 2^shift of its head, dims permuted (convert_q)
  };
  union Tiles {
    uint8_t slots[2][T::kKeys][kSlotBytes];  // FP8 K (bytes 0..191) then V (192..383) of each key
    QStaging q;                              // before the first tile's math
    float reduce[1][T::kHeads][T::kDims];    // the CTA's P V (each warp its dims), at the end
  } tiles;
  uint16_t probabilities[T::kHeads][kProbabilityHalves];  // the tile's P, FP16 (heads x keys)
  int32_t column_page[T::kColumnBatch];
  int32_t column_count[T::kColumnBatch];
  float warp_max[T::kWarps][T::kHeads];
  float warp_sum[T::kWarps][T::kHeads];
  float head_max[T::kHeads];
  float head_scale[T::kHeads];  // 2^-shift of each head's q, folded into its scores
  float head_factor[T::kHeads];  // v_scale / sum of each head (0 without a visible key)
  float head_gate[T::kHeads];    // the gate's factor of each head (one split)
  float split_lse[T::kHeads];   // kDirectCluster: this split's lse of each head, read by the peers
  static_assert((kSlotBytes / 16) % 2 == 1, "an odd number of 16-byte units a slot: conflict-free ldmatrix");
  static_assert((kProbabilityHalves * 2 / 16) % 2 == 1,
                "an odd number of 16-byte units a P row: conflict-free ldmatrix");
};

static_assert(4 * (sizeof(DirectSmem) + 1024) <= 228 * 1024, "four CTAs an SM");

static_assert(SplitKernelTraits::kMinBlocks * (sizeof(SplitSmem<false>) + 1024) <= 228 * 1024 &&
                  SplitKernelTraits::kMinBlocks * (sizeof(SplitSmem<true>) + 1024) <= 228 * 1024,
              "two CTAs an SM: the next tile's copies of one overlap the other's math");

}  // namespace sparse_decode::dsa
