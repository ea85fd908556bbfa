// The split kernel of dsa_decode (docs/kernels/dsa.md): one CTA a (row,
// split), 8 warps. It walks the split's region columns (c = split, split +
// splits, ...) in KV tiles of 64 keys (one region's, or several small
// regions' with kRegionsShareTiles: steps/load.cuh, TileCursor), scores
// them with mma.sync m16n8k16 BF16 (the row's heads are M = 16, padded; q
// in registers), keeps an online softmax in the log2 domain, and multiplies
// P (BF16 hi + lo; FP16 with FP8 caches) by V. Warp w scores keys
// 8w..8w+7 of a tile and multiplies the tile's P, through shared memory,
// by V's dims 24w..24w+23: the tile's maximum and P are its two exchanges,
// the sums stay per warp until the end. Warps 0-3 issue the copies.
// kClusterFold (BF16 caches): the row's splits run as one cluster and fold
// each other's results (steps/cluster_fold.cuh) in place of the workspace
// and the combine kernel, with the combine kernel's bits.
#pragma once

#include <cstdint>

#include "common/math.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"
#include "dsa/steps/cluster_fold.cuh"
#include "dsa/steps/convert.cuh"
#include "dsa/steps/load.cuh"
#include "dsa/steps/output.cuh"
#include "dsa/steps/pv.cuh"
#include "dsa/steps/score.cuh"
#include "dsa/steps/softmax.cuh"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

template <bool kFp8, bool kRegionsShareTiles, bool kClusterFold>
__global__ void __launch_bounds__(SplitKernelTraits::kThreads, SplitKernelTraits::kMinBlocks)
    split_kernel(const __grid_constant__ DsaParams p) {
  using T = TileTraits;
  using W = SplitKernelTraits;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  SplitSmem<kFp8>& s = *reinterpret_cast<SplitSmem<kFp8>*>(smem_bytes);
  const int64_t row = blockIdx.x / p.splits;
  const int split = static_cast<int>(blockIdx.x % p.splits);
  // g: the thread's heads g and g + 8 in the mma fragments; t: its key (dim) pair.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bool copier = threadIdx.x < T::kThreads;  // warps 0-3: copies, column table (load.cuh's geometry)

  ptx::grid_dependency_wait();  // every input is per-step data the previous kernel may write
  const RowInputs in = load_row<kFp8>(p, row, split);
  if (!in.active) {  // every CTA of a row (of its cluster) returns here
    if ((p.splits == 1 || (kClusterFold && split == 0)) && p.clear_inactive) clear_row<W::kThreads>(p, row);
    ptx::launch_dependents();
    return;
  }
  if (copier) load_q(s, p, row);  // the oldest copy group

  const int split_columns = in.split_columns;
  const int64_t request = row / (int64_t{p.groups} * p.query_len);
  const uint8_t* group_base = p.cache + (row % p.groups) * p.group_stride;
  const float scale_log2 = p.scale * in.k_scale * kLog2e;
  const int shift = kRegionsShareTiles ? p.region_shift : kRegionAlone;  // the keys a region takes in a tile

  const int key0 = warp * W::kKeysPerWarp;
  const TileAddresses tile_base = tile_addresses(s, warp, lane);
  QFragments q;  // loaded with the first batch, before the first tile's math

  HeadPair state;
  float o[W::kWarpDimTiles][4] = {};  // this warp's P V: heads g (0, 1) and g + 8 (2, 3), pv_tile's dims

  // The split's region columns in batches: each of threads 0..127 resolves
  // its columns (page and visible slots: two dependent loads for all of
  // them at once), then the batch's tiles are walked with the next tile's
  // copies in flight during this one's math.
  for (int batch0 = 0; batch0 < split_columns; batch0 += T::kColumnBatch) {
    const int columns = split_columns - batch0 < T::kColumnBatch ? split_columns - batch0 : T::kColumnBatch;
    __syncthreads();  // the previous batch's walk is done with the column table and the tiles
    if (copier) resolve_columns(s, p, in, request, batch0, columns);
    __syncthreads();
    TileCursor tile = seek_tile(s, columns, {0, 0});
    if (copier && tile.column < columns) issue_tile_at(s, p, shift, group_base, columns, tile, 0);
    if (batch0 == 0) {  // q's copies are the oldest group: into registers while tile 0 lands
      ptx::cp_async_wait_group<1>();
      if (tile.column >= columns) ptx::cp_async_wait_all();  // no tile group above q's
      __syncthreads();
      q = load_q_fragments(s, lane);  // before the first tile's barrier: its buffer takes tile 1 (BF16) or tile 0 (FP8)
    }
    for (int i = 0; tile.column < columns; ++i) {
      const auto visible = visible_keys(s, shift, columns, tile);
      const TileCursor next = next_tile(s, shift, columns, tile);
      ptx::cp_async_wait_all();  // tile i's copies (the only ones in flight)
      __syncthreads();           // ... visible to every warp; tile i - 1's readers are done
      if (copier && next.column < columns) issue_tile_at(s, p, shift, group_base, columns, next, (i + 1) % 2);
      int buffer = i % 2;
      if constexpr (kFp8) {  // every FP8 tile is converted into the one BF16 K/V tile
        convert_tile(s, buffer);
        __syncthreads();
        buffer = 0;
      }
      // The tile's math: S = Q K^T, the online softmax, P V.
      const uint32_t k_base = tile_base.k + buffer * sizeof(typename SplitSmem<kFp8>::KvTile);
      const uint32_t v_base = tile_base.v + buffer * sizeof(typename SplitSmem<kFp8>::KvTile);
      float score[1][4] = {};
      score_tile(score, q, k_base);
      publish_warp_max(s, mask_scores(score, key0, t, visible, scale_log2), warp, g, t);
      __syncthreads();
      const TileScale scale = update_max(s, state, g);
      uint32_t hi[2], lo[2];
      probabilities<kFp8>(score, scale, state, hi, lo);
      publish_probabilities(s, hi, lo, key0, g, t);
      __syncthreads();  // the tile's P; the previous tile's P V readers passed this tile's first barrier
      pv_tile<kFp8>(o, scale.rescale, tile_base.p, v_base);
      tile = next;
    }
  }
  ptx::cp_async_wait_all();  // a split without columns: q's copies, before the reduce buffer takes the tiles
  ptx::launch_dependents();
  reduce_warps(s, state, o, warp, g, t);
  if constexpr (kClusterFold) {
    end_in_cluster<W::kThreads>(p, s, row, in.v_scale);
  } else {
    write_output<W::kThreads>(p, s, row, split, in.v_scale);
  }
}

}  // namespace sparse_decode::dsa
