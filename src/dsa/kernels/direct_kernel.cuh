// The direct split kernel of dsa_decode for FP8 caches (docs/kernels/dsa.md):
// the split kernel's walk, schedule and end, with the MMAs fed from the raw
// FP8 tile. No conversion pass and no BF16 tile: each warp converts the K
// and V fragments it loads (E4M3 -> FP16, exact), q is FP16 scaled by a
// power of two a head and held in registers, and both products are
// mma.sync m16n8k16 FP16; a warp scores 16 keys and multiplies all 64 by
// 48 dims of V. Three barriers a tile (the copies landed; the tile's
// maximum; its P), and a plan of 56 KB of shared memory: four CTAs an SM. kClusterFold: the row's splits
// run as one cluster and fold each other's results (steps/cluster_fold.cuh)
// in place of the workspace and the combine kernel.
#pragma once

#include <cstdint>

#include "common/math.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"
#include "dsa/steps/cluster_fold.cuh"
#include "dsa/steps/direct_load.cuh"
#include "dsa/steps/direct_math.cuh"
#include "dsa/steps/load.cuh"
#include "dsa/steps/output.cuh"
#include "dsa/steps/softmax.cuh"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

template <bool kClusterFold, bool kRegionsShareTiles>
__global__ void __launch_bounds__(TileTraits::kThreads, DirectTraits::kMinBlocks)
    direct_kernel(const __grid_constant__ DsaParams p) {
  using T = TileTraits;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  DirectSmem& s = *reinterpret_cast<DirectSmem*>(smem_bytes);
  const int64_t row = blockIdx.x / p.splits;
  const int split = static_cast<int>(blockIdx.x % p.splits);
  // g: the thread's heads g and g + 8 in the mma fragments; t: its key (dim) group.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  ptx::grid_dependency_wait();  // every input is per-step data the previous kernel may write
  const RowInputs in = load_row<true>(p, row, split);
  if (!in.active) {  // every CTA of a row (of its cluster) returns here
    if ((p.splits == 1 || (kClusterFold && split == 0)) && p.clear_inactive) clear_row<T::kThreads>(p, row);
    ptx::launch_dependents();
    return;
  }
  load_q_raw(s, p, row);  // the oldest copy group

  const int split_columns = in.split_columns;
  const int64_t request = row / (int64_t{p.groups} * p.query_len);
  const uint8_t* group_base = p.cache + (row % p.groups) * p.group_stride;
  const float scale_log2 = p.scale * in.k_scale * kLog2e;
  const int shift = kRegionsShareTiles ? p.region_shift : kRegionAlone;  // the keys a region takes in a tile

  const int key0 = warp * T::kKeysPerWarp;
  const DirectAddresses tile_base = direct_addresses(s, warp, lane);
  float2 head_scale = make_float2(0.0f, 0.0f);  // set with q's conversion, before the first tile's math
  QFragments q;                                 // the same

  HeadPair state;
  float o[kWarpDimTiles][4] = {};  // this warp's P V: heads g (0, 1) and g + 8 (2, 3), pv_by_dims's dims

  for (int batch0 = 0; batch0 < split_columns; batch0 += T::kColumnBatch) {
    const int columns = split_columns - batch0 < T::kColumnBatch ? split_columns - batch0 : T::kColumnBatch;
    __syncthreads();  // the previous batch's walk is done with the column table and the tiles
    resolve_columns(s, p, in, request, batch0, columns);
    __syncthreads();
    TileCursor tile = seek_tile(s, columns, {0, 0});
    if (tile.column < columns) issue_slots_at(s, p, shift, group_base, columns, tile, 0);
    if (batch0 == 0) {  // q's copies are the oldest group: convert it while tile 0 lands
      ptx::cp_async_wait_group<1>();
      if (tile.column >= columns) ptx::cp_async_wait_all();  // no tile group above q's
      __syncthreads();
      convert_q(s);
      __syncthreads();
      q = load_q_fragments(s, lane);  // before the first tile's barrier: tile 1's copies overwrite the staging
      head_scale = make_float2(scale_log2 * s.head_scale[g], scale_log2 * s.head_scale[g + 8]);
    }
    for (int i = 0; tile.column < columns; ++i) {
      const auto visible = visible_keys(s, shift, columns, tile);
      const TileCursor next = next_tile(s, shift, columns, tile);
      ptx::cp_async_wait_all();  // tile i's copies (the only ones in flight)
      __syncthreads();           // ... visible to every warp; tile i - 1's readers are done
      if (next.column < columns) issue_slots_at(s, p, shift, group_base, columns, next, (i + 1) % 2);
      const uint32_t k_base = tile_base.k + (i % 2) * sizeof(s.tiles.slots[0]);
      const uint32_t v_base = tile_base.v + (i % 2) * sizeof(s.tiles.slots[0]);
      float score[2][4] = {};
      score_direct(score, q, k_base);
      publish_warp_max(s, mask_scores_by_head(score, key0, t, visible, head_scale), warp, g, t);
      __syncthreads();
      const TileScale scale = update_max(s, state, g);
      uint32_t p16[4], unused[4];
      probabilities<true>(score, scale, state, p16, unused);
      publish_probabilities(s, p16, key0, g, t);
      __syncthreads();  // the tile's P; the previous tile's P V readers passed this tile's first barrier
      pv_by_dims(o, scale.rescale, tile_base, v_base);
      tile = next;
    }
  }
  ptx::cp_async_wait_all();  // a split without columns: q's copies, before the CTA's end
  ptx::launch_dependents();
  reduce_by_dims(s, state, o, warp, g, t);
  if constexpr (kClusterFold) {
    end_in_cluster<T::kThreads>(p, s, row, in.v_scale);
  } else {
    write_output<T::kThreads>(p, s, row, split, in.v_scale);
  }
}

}  // namespace sparse_decode::dsa
