// Compile-time configuration of the packed stream kernel's 64-head form
// (64 and 128 heads of dsv4_decode_packed): one CTA serves 64 heads of a
// token on one gathered KV tile, so that each row is read once a 64-head
// group instead of once a 16-head group. The producer warpgroup, the KV
// tiles and their barriers are the 16-head kernel's. The math warpgroups
// split the heads: warpgroup g owns heads 32g .. 32g + 31 through a whole
// chunk (wgmma N = 32 over all 512 dims, its softmax, its P V), with its
// own barrier, so that neither waits for the other's phases. Its
// shared-memory plan: stream_h64_smem.cuh. The design: docs/kernels/packed.md.
#pragma once

#include "dsv4_packed/stream_traits.cuh"

namespace sparse_decode::dsv4_packed {

struct StreamH64Traits {
  using Base = StreamTraits;  // the producers, KV tiles, q layout and scale tiles
  static constexpr int kHeads = 64;
  static constexpr int kWarpgroupHeads = kHeads / 2;  // a math warpgroup's heads: wgmma N = 32
  static constexpr int kWarpgroupHeadTiles = kWarpgroupHeads / 16;  // P V: mma.sync M = 16 heads a tile
  static constexpr int kWarpDimTiles = 2;  // P V: a warp's 64-dim tiles (of 8) for its warpgroup's heads
  static constexpr int kChunkColumns = Base::kChunkColumns;
  static constexpr int kWarps = Base::kWarps;
  static constexpr int kThreads = Base::kThreads;
  static constexpr int kProducerWarps = Base::kProducerWarps;
  static constexpr int kLaunchThreads = Base::kLaunchThreads;
  static constexpr int kBuffers = Base::kBuffers;
  static constexpr int kCtasPerSm = 1;  // 182 KiB of shared memory, 240 registers a math thread
  static constexpr int kMathBarrier = Base::kMathBarrier;
  static constexpr int kTileFreeBarrier = Base::kTileFreeBarrier;
  // A math warpgroup's own phases (hardware barrier 4 + g, after the KV tiles' 2 and 3).
  static constexpr int kWarpgroupBarrier = kTileFreeBarrier + kBuffers;
  static constexpr int kTileRowBytes = Base::kTileRowBytes;
  static constexpr int kScaleTiles = Base::kScaleTiles;
  static constexpr int kTailByte = Base::kTailByte;
  static constexpr int kQPieces = Base::kQPieces;
  static constexpr int kCoreBytes = Base::kCoreBytes;
  static constexpr int kQRowGroupBytes = Base::kQRowGroupBytes;
  static constexpr int kFp8Blocks = Base::kFp8Blocks;
  static constexpr int kScoreTiles = kScaleTiles + 1;  // S: every warpgroup all 8 tiles (7 FP8, the BF16 dims)
  static constexpr int kStepsPerTile = Base::kStepsPerTile;
  // Scores: rows of 68 floats keep the wgmma fragment's stores and the
  // softmax's float4 loads (8 heads a quarter warp) free of bank conflicts.
  static constexpr int kScoreRowFloats = kChunkColumns + 4;
  static constexpr int kProbRowFloats = Base::kProbRowFloats;
  // Softmax: 4 threads a head (lanes l, l + 8, l + 16, l + 24), 16 columns each.
  static constexpr int kSoftmaxThreads = kThreads / 2 / kWarpgroupHeads;
  static constexpr int kSoftmaxColumns = kChunkColumns / kSoftmaxThreads;
  // Registers: all at launch, then the producers give theirs to the math warps.
  static constexpr int kLaunchRegisters = (65536 / kCtasPerSm / kLaunchThreads) / 8 * 8;
  static constexpr int kProducerRegisters = 24;  // the producer step needs 23 (the 16-head kernel gives it 32)
  static constexpr int kMathRegisters =
      ((kLaunchRegisters * kLaunchThreads - kProducerRegisters * 32 * kProducerWarps) / kThreads) / 8 * 8;

  static_assert(kHeads == 64 && kWarpgroupHeadTiles == 2,
                "64 heads: two warpgroups of 32 (wgmma N = 32 for S, 2 mma.sync head tiles for P V)");
  static_assert(kWarpDimTiles * 4 == kScoreTiles, "P V: a warpgroup's 4 warps cover the 8 dim tiles, 2 each");
  static_assert(kSoftmaxThreads == 4 && kSoftmaxColumns == 16, "softmax: 4 threads a head, 4 float4 a thread");
  static_assert(kMathRegisters == 240 && kLaunchRegisters == 168, "setmaxnreg: 168 at launch, 240 for the math");
  static_assert(kProducerRegisters * 32 * kProducerWarps + kMathRegisters * kThreads <=
                    kLaunchRegisters * kLaunchThreads,
                "setmaxnreg moves registers within the CTA's launch allocation");
};

}  // namespace sparse_decode::dsv4_packed
