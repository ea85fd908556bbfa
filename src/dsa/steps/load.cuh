// The split kernel's loads: a region column's page and visible slots, and
// the cp.async copies of a KV tile's slots.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"

namespace sparse_decode::dsa {

// The keys of a region column (logical block `block`) that the row sees:
// its page and how many of its first slots are visible (0: the column
// contributes nothing and, past the position, its table entry is not read).
struct RegionKeys {
  int64_t page;
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

// Issues the copies of slots [0, n) at `slots` into tile buffer `buffer`
// (FP8: the staging buffer); keys n..63 are zero-filled, so the NaN the
// caller may keep in unread slots never reaches an MMA.
template <bool kFp8>
__device__ __forceinline__ void issue_tile(SplitSmem<kFp8>& s, const uint8_t* slots, int64_t slot_stride, int n,
                                           int buffer) {
  using T = SplitTraits;
  constexpr int kSlotPieces = kDsaSlotDim * (kFp8 ? 1 : 2) / 16;  // 16-byte pieces of a slot: 24 FP8, 48 BF16
  constexpr int kHalfPieces = kSlotPieces / 2;                    // K, then V
  for (int x = threadIdx.x; x < T::kKeys * kSlotPieces; x += T::kThreads) {
    const int key = x / kSlotPieces, piece = x % kSlotPieces;
    const uint8_t* src = key < n ? slots + key * slot_stride + piece * 16 : slots;
    uint32_t dst;
    if constexpr (kFp8) {
      dst = ptx::smem_address(&s.staging[buffer][key][piece * 16]);
    } else {
      dst = piece < kHalfPieces ? ptx::smem_address(&s.tiles.kv[buffer].k[key][piece * 8])
                                : ptx::smem_address(&s.tiles.kv[buffer].v[key][(piece - kHalfPieces) * 8]);
    }
    ptx::cp_async_16(dst, src, key < n ? 16u : 0u);
  }
  ptx::cp_async_commit();
}

// A position in the split's walk: region column `column` of the batch, its
// slots from `first` (first >= count: past the batch's last tile).
struct TileCursor {
  int column;
  int first;
};

// The first tile at or after (column, first) of the batch's `columns`.
template <bool kFp8>
__device__ __forceinline__ TileCursor seek_tile(const SplitSmem<kFp8>& s, int columns, TileCursor at) {
  while (at.column < columns && at.first >= s.column_count[at.column]) at = {at.column + 1, 0};
  return at;
}

}  // namespace sparse_decode::dsa
