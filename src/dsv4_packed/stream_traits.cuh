// Compile-time configuration and shared-memory plan of the packed-row
// stream kernel (large batches of dsv4_decode_packed): FP8 rows stay FP8 in
// shared memory, the MMAs are FP16, the per-tile scales go on the score
// accumulators and on P (docs/kernels/packed.md, "The packed stream kernel").
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4_packed {

struct StreamTraits {
  static constexpr int kHeads = 16;         // heads a CTA: wgmma N = 16, mma.sync M = 16
  static constexpr int kChunkColumns = 64;  // rows gathered and scored at once (wgmma M = 64)
  static constexpr int kWarps = 8;          // math warps: two warpgroups
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kProducerWarps = 4;  // one warpgroup issues every copy
  static constexpr int kLaunchThreads = kThreads + 32 * kProducerWarps;
  static constexpr int kProducerRows = kChunkColumns / kProducerWarps;  // one lane a row
  // A tile's barrier: each producer warp's expected bytes (one arrival), then
  // every producer lane once its scales, zeros and mask are written.
  static constexpr int kRowsLandedArrivals = kProducerWarps * (1 + 32);
  static constexpr int kBuffers = 2;        // KV tiles: the next chunk lands during this one's math
  static constexpr int kCtasPerSm = 2;
  // Hardware barriers besides __syncthreads' 0: the math warps' own, then one
  // a KV tile (the math warps arrive when done with it, the producers wait).
  static constexpr int kMathBarrier = 1;
  static constexpr int kTileFreeBarrier = 2;
  // A tile row: the 576 data bytes as copied (448 E4M3 dims, 64 BF16 dims),
  // padded by 16 so that the 8 rows of an ldmatrix fall on distinct banks.
  static constexpr int kTileRowBytes = kPackedDataBytes + 16;
  static constexpr int kScaleTiles = kPackedTiles;                 // 7 UE8M0 bytes a row
  static constexpr int kTailByte = kPackedFp8Dims;                 // where the BF16 dims start in a row
  // q: BF16 [head group of 8][16-byte piece][head % 8][16 bytes], wgmma's
  // K-major core matrices; dims 0..447 rewritten as FP16 (see packed.md).
  static constexpr int kQPieces = kHeadDim * 2 / 16;
  static constexpr int kCoreBytes = 8 * 16;
  static constexpr int kQRowGroupBytes = kQPieces * kCoreBytes;
  static constexpr int kFp8Blocks = kPackedFp8Dims / 16;
  // S^T = K Q^T: warpgroup g takes score tiles 4g .. 4g + 3 (tile 7: the BF16 dims).
  static constexpr int kTilesPerWarpgroup = 4;
  static constexpr int kStepsPerTile = kPackedTileDims / 16;
  static constexpr int kScoreRowFloats = kChunkColumns + 4;
  // P V: warp w owns dims 64w .. 64w + 63, scale tile w (warp 7: the BF16 dims).
  static constexpr int kProbRowFloats = kChunkColumns + 8;  // 8-byte loads of a quad's rows in two wavefronts
  static constexpr int kSoftmaxThreads = kThreads / kHeads;
  static constexpr int kSoftmaxColumns = kChunkColumns / kSoftmaxThreads;
  // Registers: all at launch, then the producers give theirs to the math warps.
  static constexpr int kLaunchRegisters = (65536 / kCtasPerSm / kLaunchThreads) / 8 * 8;
  static constexpr int kProducerRegisters = 32;
  static constexpr int kMathRegisters =
      ((kLaunchRegisters * kLaunchThreads - kProducerRegisters * 32 * kProducerWarps) / kThreads) / 8 * 8;

  static_assert(kTileRowBytes % 16 == 0 && (kTileRowBytes / 16) % 2 == 1,
                "bulk rows 16-byte aligned; an odd number of 16-byte units a row puts 8 rows on distinct banks");
  static_assert(2 * kTilesPerWarpgroup == kScaleTiles + 1, "two warpgroups: the 7 FP8 tiles and the BF16 tail");
  static_assert(kWarps == kScaleTiles + 1 && kHeadDim / kWarps == kPackedTileDims,
                "P V: one warp a scale tile, the last warp the BF16 dims");
  static_assert(kProducerRows == 16, "a producer lane copies one row; lanes 0..15 of each producer warp");
  static_assert(kSoftmaxThreads == 16 && kSoftmaxColumns == 4, "softmax: a half warp a head, a float4 a thread");
  static_assert(kMathRegisters >= 96 && kMathRegisters % 8 == 0, "setmaxnreg: multiples of 8, ~100 for the math");
  static_assert(kProducerRegisters * 32 * kProducerWarps + kMathRegisters * kThreads <=
                    kLaunchRegisters * kLaunchThreads,
                "setmaxnreg moves registers within the CTA's launch allocation");
};

// Shared memory of one CTA; sizeof() is the dynamic shared memory of the launch.
struct StreamSmem {
  using T = StreamTraits;
  union {
    alignas(16) uint8_t kv[T::kBuffers][T::kChunkColumns][T::kTileRowBytes];  // rows as copied (bulk: 16-aligned)
    struct {  // after the walk, two CTAs a unit: what the peer sends of the heads this CTA stores
      float values[T::kThreads][16];  // a thread's P V values of one head (its 64 dims' share)
      int scale_unit[T::kThreads];
      float2 stats[T::kHeads];        // (running max, running sum) of every head
    } exchange;
  };
  uint32_t scale_bits[T::kBuffers][T::kScaleTiles][T::kChunkColumns];        // scale byte << 23; 0 for masked rows
  uint64_t rows_landed[T::kBuffers];  // a tile's copies and scales (kRowsLandedArrivals)
  uint64_t exchange_landed;           // two CTAs a unit: the peer's share has landed in `exchange`
  alignas(16) uint8_t q[T::kHeads / 8][T::kQPieces][8][16];
  float scores[2][T::kHeads][T::kScoreRowFloats];  // each warpgroup's share of S (scaled by 2^q_shift)
  float probs[T::kHeads][T::kProbRowFloats];       // exp2(score - running max), FP32
  float query_amax[T::kWarps][T::kHeads];          // each warp's largest |q| a head (its dim blocks)
  float score_factor[T::kHeads];                   // softmax scale * log2(e) * 2^-q_shift
  float running_max[T::kHeads];                    // log2 domain
  float running_sum[T::kHeads];
  float rescale[T::kHeads];                        // factor on O when the running max moves
  float sink_log2[T::kHeads];
  alignas(8) uint8_t column_mask[T::kBuffers][T::kChunkColumns / 8];
};

// What the peer of a pair sends: every thread's values and scale unit, and the statistics.
inline constexpr uint32_t kPairExchangeBytes = StreamTraits::kThreads * (16 * sizeof(float) + sizeof(int)) +
                                               StreamTraits::kHeads * sizeof(float2);
static_assert(kPairExchangeBytes == sizeof(StreamSmem::exchange),
              "the pair's expected bytes are the whole exchange area, each byte sent once");

static_assert(sizeof(StreamSmem) + 1024 <= 228 * 1024 / StreamTraits::kCtasPerSm,
              "two CTAs an SM");

// The split path's workspace (docs/kernels/packed.md, "The split path"): a
// share for each CTA of each (token, 16-head group) unit, share u * CTAs + r.
// A share holds math thread t's P V values of head h as 4 floats for each
// (32-dim group, 16-dim half): values[(slice * 2 + h) * kThreads + t], slice =
// 2 * group + half (a warp's store is 512 contiguous bytes); the thread's
// scale unit of each head, units[h * kThreads + t]; every head's (running
// max, running sum). The combine kernel gives each (unit, warp) a CTA in
// which thread (h, slice, lane) folds one such float4 over the unit's shares.
struct SplitWorkspace {
  using T = StreamTraits;
  static constexpr int kSlices = 4;  // (32-dim group, 16-dim half) of a warp's 64 dims
  static constexpr size_t kValueBytes = size_t{kSlices} * 2 * T::kThreads * 16;
  static constexpr size_t kUnitBytes = size_t{2} * T::kThreads * sizeof(int32_t);
  static constexpr size_t kStatsBytes = size_t{T::kHeads} * 8;
  static constexpr size_t kShareBytes = kValueBytes + kUnitBytes + kStatsBytes;
  static constexpr size_t kAlignment = 16;
  static constexpr int kMaxShares = 16;     // CTAs a unit at most: the combine keeps every share's float4 in registers
  static constexpr int kCombineThreads = 2 * kSlices * 32;
  static_assert(kShareBytes % kAlignment == 0, "every share starts 16-byte aligned");
  static_assert(kValueBytes == T::kThreads * 32 * sizeof(float), "a math thread's 32 P V values");
};

}  // namespace sparse_decode::dsv4_packed
