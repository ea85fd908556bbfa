// Compile-time configuration of the packed stream kernel (large batches of
// dsv4_decode_packed, and the split path): FP8 rows stay FP8 in shared
// memory, the MMAs are FP16, the per-scale-tile scales go on the score
// accumulators and on P. Its shared-memory plan: stream_smem.cuh; the split
// path's workspace: split_workspace.cuh. The design: docs/kernels/packed.md.
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
  // A KV tile's barrier: each producer warp's expected bytes (one arrival), then
  // every producer lane once its scales, zeros and mask are written.
  static constexpr int kRowsLandedArrivals = kProducerWarps * (1 + 32);
  static constexpr int kBuffers = 2;        // KV tiles: the next chunk lands during this one's math
  static constexpr int kCtasPerSm = 2;
  // Hardware barriers besides __syncthreads' 0: the math warps' own, then one
  // a KV tile (the math warps arrive when done with it, the producers wait).
  static constexpr int kMathBarrier = 1;
  static constexpr int kTileFreeBarrier = 2;
  // A KV tile row: the 576 data bytes as copied (448 E4M3 dims, 64 BF16 dims),
  // padded by 16 so that the 8 rows of an ldmatrix fall on distinct banks.
  static constexpr int kTileRowBytes = kPackedDataBytes + 16;
  static constexpr int kScaleTiles = kPackedTiles;                 // 7 UE8M0 bytes a row
  static constexpr int kTailByte = kPackedFp8Dims;                 // where the BF16 dims start in a row
  // q: BF16 [head / 8][16-byte piece][head % 8][16 bytes], wgmma's K-major
  // core matrices; dims 0..447 rewritten as FP16 (steps/stream/query.cuh).
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

}  // namespace sparse_decode::dsv4_packed
