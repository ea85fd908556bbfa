// Compile-time configuration of the packed stream kernel's 64-head form
// (64 and 128 heads of dsv4_decode_packed): one CTA serves 64 heads of a
// token, the heads as the M of every wgmma. The producer warpgroup and its
// raw KV tiles are the 16-head kernel's; the math warpgroups dequantize
// each chunk's rows once into a BF16 tile that is both K (for S) and V
// (for P V). Warpgroup 0 scores and runs the softmax; both then take half
// of P V's dims. Its shared-memory plan: stream_h64_smem.cuh. The design:
// docs/kernels/packed_h64.md.
#pragma once

#include "dsv4_packed/stream_traits.cuh"

namespace sparse_decode::dsv4_packed {

struct StreamH64Traits {
  using Base = StreamTraits;  // the producers, raw KV tiles, scale tiles and q pieces
  static constexpr int kHeads = 64;  // the wgmma M: rows 16w + lane / 4 (+ 8) of warp w of a warpgroup
  static constexpr int kChunkColumns = Base::kChunkColumns;
  static constexpr int kWarps = Base::kWarps;
  static constexpr int kThreads = Base::kThreads;
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kProducerWarps = Base::kProducerWarps;
  static constexpr int kLaunchThreads = Base::kLaunchThreads;
  static constexpr int kBuffers = Base::kBuffers;
  static constexpr int kCtasPerSm = 1;  // ~227 KiB of shared memory, 240 registers a math thread
  static constexpr int kTileRowBytes = Base::kTileRowBytes;
  static constexpr int kScaleTiles = Base::kScaleTiles;
  static constexpr int kTailByte = Base::kTailByte;
  static constexpr int kCoreBytes = Base::kCoreBytes;
  // q and the dequantized rows: [8-row group][16-byte piece][row % 8][16 bytes],
  // wgmma's core matrices without swizzle, dims in their natural order.
  static constexpr int kPieces = Base::kQPieces;             // 64 pieces of 8 dims
  static constexpr int kFp8Pieces = kPackedFp8Dims / 8;      // 56 from E4M3, then the BF16 dims
  static constexpr int kRowGroupBytes = kPieces * kCoreBytes;
  static constexpr int kFp8Blocks = Base::kFp8Blocks;        // 28 blocks of 16 E4M3 bytes a row
  static constexpr int kTailPieces = kPieces - kFp8Pieces;   // 8 pieces of the BF16 dims
  // P V: warpgroup g dims 256g .. 256g + 255 (wgmma N = 256).
  static constexpr int kHalfDims = kHeadDim / 2;
  static constexpr int kProbRowFloats = kChunkColumns + 8;  // float2 rows of a half warp on distinct banks
  // Hardware barriers: 0 (__syncthreads), the math warps' 1, the raw KV
  // tiles' 2 and 3 (every math thread and the producers, as at 16 heads),
  // then warpgroup 0's P handoff to warpgroup 1, then each warpgroup's
  // staged output (5 + g).
  static constexpr int kMathBarrier = Base::kMathBarrier;
  static constexpr int kTileFreeBarrier = Base::kTileFreeBarrier;
  static constexpr int kProbsReadyBarrier = kTileFreeBarrier + kBuffers;
  static constexpr int kOutputBarrier = kProbsReadyBarrier + 1;
  // Registers: all at launch, then the producers give theirs to the math warps.
  static constexpr int kLaunchRegisters = (65536 / kCtasPerSm / kLaunchThreads) / 8 * 8;
  static constexpr int kProducerRegisters = 24;  // the producer step needs 23
  static constexpr int kMathRegisters =
      ((kLaunchRegisters * kLaunchThreads - kProducerRegisters * 32 * kProducerWarps) / kThreads) / 8 * 8;

  static_assert(kHeads == 64 && kChunkColumns == 64, "one wgmma M of heads, one N (S) or K (P V) of 64 rows");
  static_assert(kThreads == 2 * kWarpgroupThreads, "two math warpgroups");
  static_assert(kFp8Pieces == 56 && kTailPieces == 8 && kPieces == 64, "448 E4M3 dims, then 64 BF16 dims");
  static_assert(kHalfDims == 256, "P V: one wgmma N of 256 dims a warpgroup");
  static_assert(kOutputBarrier + 1 < 16, "16 hardware barriers a CTA");
  static_assert(kMathRegisters == 240 && kLaunchRegisters == 168, "setmaxnreg: 168 at launch, 240 for the math");
  static_assert(kProducerRegisters * 32 * kProducerWarps + kMathRegisters * kThreads <=
                    kLaunchRegisters * kLaunchThreads,
                "setmaxnreg moves registers within the CTA's launch allocation");
};

}  // namespace sparse_decode::dsv4_packed
