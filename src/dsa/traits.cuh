// The configurations of the dsa_decode kernels (docs/kernels/dsa.md).
//
// Words: a row is a (token, KV group) pair with its `heads` <= 16 query
// heads; a split is one part of a row's region columns (split s takes
// columns s, s + splits, ...); a KV tile holds up to 64 visible slots (keys)
// of one region; a granule is 4 dims of one head's output.
#pragma once

#include "dsa/tile_rules.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::dsa {

// The geometry of a row's KV tiles and of the 128-thread steps (the
// direct kernel's CTA; the row's inputs, the column table and the copies
// in every kernel): 4 warps, warp w scores keys 16w..16w+15 of a KV tile.
struct TileTraits {
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kHeads = 16;                    // mma M: the row's heads, zero-padded
  static constexpr int kKeys = 64;                     // keys a KV tile
  static constexpr int kKeysPerWarp = kKeys / kWarps;  // 16: a warp's scores, two n8 tiles
  static constexpr int kDims = kDsaHeadDim;            // 192
  static constexpr int kRowHalves = kDims + 8;         // 400-byte rows: 25 x 16 B, ldmatrix rows on distinct banks
  static constexpr int kScoreSteps = kDims / 16;       // k16 steps of Q K^T
  static constexpr int kGranules = kDims / 4;          // 4-dim pieces of an output row
  static constexpr int kColumnBatch = 256;             // region columns a split resolves at once
  static_assert(kKeysPerWarp == 16, "a warp's P is one k16 A fragment (two n8 score tiles)");
  static_assert(kColumnBatch % kThreads == 0, "a thread resolves kColumnBatch / kThreads columns of a batch");
  static_assert(kDims % 16 == 0, "Q K^T walks k16 steps; P V pairs of n8 tiles");
  static_assert((kRowHalves * 2 / 16) % 2 == 1, "an odd number of 16-byte units a row: conflict-free ldmatrix");
};

static_assert(TileTraits::kKeys == kTileKeys, "a KV tile's keys: tile_rules.h");

// The split kernel (BF16 caches, and FP8 staged through a BF16 tile): one
// CTA a (row, split), 8 warps; warp w scores keys 8w..8w+7 of a KV tile
// (one n8 tile) and multiplies the tile's P, all 64 keys, by V's dims
// 24w..24w+23. Warps 0-3 issue the copies and resolve the column table
// (TileTraits' 128-thread steps). Two CTAs an SM: 128 registers a thread.
struct SplitKernelTraits {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kMinBlocks = 2;
  static constexpr int kKeysPerWarp = TileTraits::kKeys / kWarps;  // 8: one n8 score tile
  static constexpr int kWarpDims = TileTraits::kDims / kWarps;     // 24: three n8 tiles of P V
  static constexpr int kWarpDimTiles = kWarpDims / 8;
  static_assert(kKeysPerWarp == 8, "a warp's scores are one n8 tile");
  static_assert(kWarpDims == 24, "a warp's V is one ldmatrix.x4.trans and one .x2 a k16 step");
  static_assert(kThreads >= TileTraits::kThreads, "warps 0-3 run the 128-thread steps");
};

// The direct kernel (FP8 caches): TileTraits' geometry; its plan of
// shared memory leaves room for four CTAs an SM, so it asks for registers
// that fit them (65536 / (4 x 128) = 128 a thread).
struct DirectTraits {
  static constexpr int kMinBlocks = 4;
};

// The combine kernel: kSlices CTAs a row, one (head, granule) pair a thread.
struct CombineTraits {
  static constexpr int kThreads = 256;
  static constexpr int kSlices = (TileTraits::kHeads * TileTraits::kGranules + kThreads - 1) / kThreads;
  // Instances by a bound on the splits (4, 8, 16, 32): a thread holds one
  // float4 a split, and a 32-split kernel's 158 registers a thread at every
  // T cost the split kernel its second CTA an SM while the combine's CTAs
  // wait (measured +3.7 us at T = 128).
  static constexpr int bound(int splits) { return splits <= 4 ? 4 : splits <= 8 ? 8 : splits <= 16 ? 16 : 32; }
  static_assert(kThreads >= TileTraits::kHeads, "thread h computes head h's weights");
};

}  // namespace sparse_decode::dsa
