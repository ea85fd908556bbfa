// The split kernel's loads: the row's inputs, Q, the page and visible
// slots of each region column of a batch, and the cp.async copies of a KV
// tile's slots.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/load.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"
#include "dsa/tile_rules.h"

namespace sparse_decode::dsa {

// What a split reads before anything else: its region columns, the first
// batch's region ids, the row's flag and position, and the FP8 scales (1
// with BF16 caches).
struct RowInputs {
  int split_columns;           // region columns c = split, split + splits, ... below R
  const int32_t* row_regions;  // the split's first region column; the next is `splits` further
  // This thread's region ids of the first batch (-1: no column).
  int32_t first_blocks[TileTraits::kColumnBatch / TileTraits::kThreads];
  bool active;
  int32_t position;
  float k_scale;
  float v_scale;
};

// The loads of RowInputs, issued at once (L2 loads that ptxas may not sink
// into the branches that use them): one DRAM trip before the block table
// instead of three in a row.
template <bool kFp8>
__device__ __forceinline__ RowInputs load_row(const DsaParams& p, int64_t row, int split) {
  using T = TileTraits;
  RowInputs in;
  in.split_columns = (p.num_regions - split + p.splits - 1) / p.splits;
  in.row_regions = p.regions + row * p.regions_stride + split;
#pragma unroll
  for (int u = 0; u < T::kColumnBatch / T::kThreads; ++u) {
    const int j = threadIdx.x + u * T::kThreads;
    in.first_blocks[u] = j < in.split_columns ? ptx::load_l2(in.row_regions + int64_t{j} * p.splits) : -1;
  }
  in.active = ptx::load_l2(p.active + row) != 0;
  in.position = ptx::load_l2(p.positions + row);
  in.k_scale = kFp8 ? ptx::load_l2(p.k_scale) : 1.0f;
  in.v_scale = kFp8 ? ptx::load_l2(p.v_scale) : 1.0f;
  return in;
}

// The split kernel's query staging: the first 16 rows of the last buffer's
// K tile, which takes no copy (BF16) or conversion (FP8) before the first
// tile's barrier.
template <bool kFp8>
__device__ __forceinline__ uint16_t (*q_staging(SplitSmem<kFp8>& s))[TileTraits::kRowHalves] {
  return s.tiles.kv[SplitSmem<kFp8>::kTileBuffers - 1].k;
}

// Issues the copies of Q into its staging (threads 0..127): `heads` rows of
// 192 dims, rows past `heads` zero.
template <bool kFp8>
__device__ __forceinline__ void load_q(SplitSmem<kFp8>& s, const DsaParams& p, int64_t row) {
  using T = TileTraits;
  uint16_t(*q)[T::kRowHalves] = q_staging(s);
  for (int x = threadIdx.x; x < T::kHeads * (T::kDims / 8); x += T::kThreads) {
    const int head = x / (T::kDims / 8), piece = x % (T::kDims / 8);
    const bool exists = head < p.heads;
    const uint16_t* src = p.q + row * p.q_row_stride + (exists ? head * p.q_head_stride + piece * 8 : 0);
    ptx::cp_async_16(ptx::smem_address(&q[head][piece * 8]), src, exists ? 16u : 0u);
  }
  ptx::cp_async_commit();
}

// The keys of a region column (logical block `block`) that the row sees:
// its page and how many of its first slots are visible (0: the column
// contributes nothing and, past the position, its table entry is not read).
struct RegionKeys {
  int32_t page;
  int32_t count;
};

__device__ __forceinline__ RegionKeys region_keys(const DsaParams& p, int64_t request, int32_t position,
                                                  int32_t block) {
  if (block < 0 || block >= p.max_blocks) return {0, 0};
  const int64_t first = int64_t{block} * p.block_size;
  if (first > position) return {0, 0};
  const int32_t page = p.block_table[request * p.block_table_stride + block];
  if (page < 0 || page >= p.num_pages) return {0, 0};
  const int64_t visible = int64_t{position} - first + 1;
  return {page, static_cast<int32_t>(visible < p.block_size ? visible : p.block_size)};
}

// The column table of the batch of `columns` region columns from `batch0`:
// each thread resolves its columns' pages and visible slots (two dependent
// loads for all of them at once).
template <class Smem>
__device__ __forceinline__ void resolve_columns(Smem& s, const DsaParams& p, const RowInputs& in,
                                                int64_t request, int batch0, int columns) {
  using T = TileTraits;
#pragma unroll
  for (int u = 0; u < T::kColumnBatch / T::kThreads; ++u) {
    const int j = threadIdx.x + u * T::kThreads;
    if (j >= columns) break;
    const int32_t block = batch0 == 0 ? in.first_blocks[u] : in.row_regions[int64_t{batch0 + j} * p.splits];
    const RegionKeys region = region_keys(p, request, in.position, block);
    s.column_page[j] = region.page;
    s.column_count[j] = region.count;
  }
}

// Thread x copies the 16-byte pieces x % 8 + 8m of a tile's keys x / 8 +
// 16j: a warp's copy covers four whole 128-byte lines.
inline constexpr int kLinePieces = 8;                                   // 128 bytes of a slot
inline constexpr int kCopyKeyStep = TileTraits::kThreads / kLinePieces;  // 16 keys a pass of the CTA
static_assert(TileTraits::kKeys % kCopyKeyStep == 0, "the CTA's passes cover the tile's keys");

// Issues thread x's pieces piece0 + 8m of `key` (kPieces 16-byte pieces a
// slot) from `src`, the address of piece piece0: zero-filled, reading
// nothing, where the key is not present.
template <int kPieces, class Destination>
__device__ __forceinline__ void copy_key_pieces(Destination destination, int key, int piece0, const uint8_t* src,
                                                bool present) {
  static_assert(kPieces % kLinePieces == 0, "a slot is whole 128-byte lines");
#pragma unroll
  for (int m = 0; m < kPieces / kLinePieces; ++m) {
    ptx::cp_async_16(destination(key, piece0 + kLinePieces * m), src + 128 * m, present ? 16u : 0u);
  }
}

// Issues the copies of a tile of one region, its slots [0, n) at `slots`
// (kPieces 16-byte pieces a slot), as one commit group; `destination(key,
// piece)` is the piece's shared-memory address. Keys n..63 are zero-filled,
// so the NaN the caller may keep in unread slots never reaches an MMA.
// A pass's pieces are its address plus a constant, so that a copy costs
// its instruction alone.
template <int kPieces, class Destination>
__device__ __forceinline__ void issue_slot_copies(const uint8_t* slots, int64_t slot_stride, int n,
                                                  Destination destination) {
  using T = TileTraits;
  const int key0 = threadIdx.x / kLinePieces, piece0 = threadIdx.x % kLinePieces;
  const int64_t key_step_bytes = kCopyKeyStep * slot_stride;
  // A zero fill reads nothing; its address stays at the thread's last
  // present key, or inside slot 0 (n >= 1): keys grow with j, so a pass's
  // address is the previous one's, advanced where its key is present.
  const uint8_t* src = slots + piece0 * 16 + (key0 < n ? key0 * slot_stride : 0);
#pragma unroll
  for (int j = 0; j < T::kKeys / kCopyKeyStep; ++j) {
    const int key = key0 + kCopyKeyStep * j;
    const bool present = key < n;
    if (j > 0 && present) src += key_step_bytes;
    copy_key_pieces<kPieces>(destination, key, piece0, src, present);
  }
  ptx::cp_async_commit();
}

// The same for a tile that regions share (shift < kRegionAlone): each
// key's page and count from the column table.
template <int kPieces, class Smem, class Destination>
__device__ __forceinline__ void issue_region_copies(const Smem& s, const DsaParams& p, int shift,
                                                    const uint8_t* group_base, int columns, TileCursor tile,
                                                    Destination destination) {
  using T = TileTraits;
  const int key0 = threadIdx.x / kLinePieces, piece0 = threadIdx.x % kLinePieces;
  // The tile's first slot is visible (seek_tile): the zero fills' address.
  const uint8_t* dummy = group_base + s.column_page[tile.column] * p.page_stride + piece0 * 16;
#pragma unroll
  for (int j = 0; j < T::kKeys / kCopyKeyStep; ++j) {
    const int key = key0 + kCopyKeyStep * j;
    const int column = tile.column + (key >> shift);
    const int slot = key & ((1 << shift) - 1);
    const bool present = column < columns && slot < s.column_count[column];
    const uint8_t* src =
        present ? group_base + s.column_page[column] * p.page_stride + slot * p.slot_stride + piece0 * 16 : dummy;
    copy_key_pieces<kPieces>(destination, key, piece0, src, present);
  }
  ptx::cp_async_commit();
}

// Issues the copies of the tile at `tile`: one region's up to 64 slots, or
// the regions that share it.
template <int kPieces, class Smem, class Destination>
__device__ __forceinline__ void issue_tile_copies(const Smem& s, const DsaParams& p, int shift,
                                                  const uint8_t* group_base, int columns, TileCursor tile,
                                                  Destination destination) {
  if (shift == kRegionAlone) {
    const int n = min(s.column_count[tile.column] - tile.first, TileTraits::kKeys);
    // A visible column's page and the tile's first slot are not negative:
    // unsigned products take no sign extension.
    const uint64_t page = static_cast<uint32_t>(s.column_page[tile.column]);
    const uint64_t first = static_cast<uint32_t>(tile.first);
    issue_slot_copies<kPieces>(group_base + page * p.page_stride + first * p.slot_stride, p.slot_stride, n,
                               destination);
  } else {
    issue_region_copies<kPieces>(s, p, shift, group_base, columns, tile, destination);
  }
}

// Issues the copies of the KV tile at `tile` into tile buffer `buffer`
// (FP8: the staging buffer; BF16: K into the K tile, V into the V tile).
template <bool kFp8>
__device__ __forceinline__ void issue_tile_at(SplitSmem<kFp8>& s, const DsaParams& p, int shift,
                                              const uint8_t* group_base, int columns, TileCursor tile, int buffer) {
  constexpr int kSlotPieces = kDsaSlotDim * (kFp8 ? 1 : 2) / 16;  // 16-byte pieces of a slot: 24 FP8, 48 BF16
  constexpr int kHalfPieces = kSlotPieces / 2;                    // K, then V
  issue_tile_copies<kSlotPieces>(s, p, shift, group_base, columns, tile, [&](int key, int piece) {
    if constexpr (kFp8) {
      return ptx::smem_address(&s.staging[buffer][key][piece * 16]);
    } else {
      return piece < kHalfPieces ? ptx::smem_address(&s.tiles.kv[buffer].k[key][piece * 8])
                                 : ptx::smem_address(&s.tiles.kv[buffer].v[key][(piece - kHalfPieces) * 8]);
    }
  });
}

}  // namespace sparse_decode::dsa
