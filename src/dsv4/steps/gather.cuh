// The gather of a chunk: its column entries (from global memory, or staged
// in shared memory a chunk ahead), their indices, and the rows, copied into
// a KV tile by bulk copies, by the math warps or by a producer warpgroup.
#pragma once

#include <cstdint>

#include "common/instrument.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/column_source.cuh"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4 {

// Byte offset of row `row` in a pool (page_size 1: rows row_stride apart).
__device__ __forceinline__ int64_t row_offset(const PoolParams& pool, int64_t row) {
  if (pool.page_size == 1) return row * pool.row_stride;
  return (row / pool.page_size) * pool.page_stride + (row % pool.page_size) * pool.row_stride;
}

// The entry this thread's gather lane reads for the chunk at `column0`
// (-1 without one), from global memory: the first chunk's.
template <class Traits>
__device__ __forceinline__ int32_t chunk_entry(const Dsv4Params& p, int64_t token, int column0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  return load_entry<Traits>(p, token, column0 + warp * Traits::kGatherRowsPerWarp + lane % Traits::kGatherRowsPerWarp);
}

// The entry a producer lane copies in chunk `chunk` of the token (lane l <
// kProducerRows of producer warp w: column 64 chunk + kProducerRows w + l),
// -1 without one.
template <class Traits>
__device__ __forceinline__ int32_t producer_entry(const Dsv4Params& p, int64_t token, int chunk) {
  const int lane = threadIdx.x % 32;
  const int column =
      chunk * Traits::kChunkColumns + (threadIdx.x / 32 - Traits::kFirstProducerWarp) * Traits::kProducerRows + lane;
  return lane < Traits::kProducerRows ? load_entry<Traits>(p, token, column) : -1;
}

// A producer lane's entries in the first two chunks of its walk from chunk
// `first` (producer_entry; -1 without one).
struct ProducerEntries {
  int32_t first = -1;
  int32_t second = -1;
};

template <class Traits>
__device__ __forceinline__ ProducerEntries first_producer_entries(const Dsv4Params& p, int64_t token, int first) {
  return {producer_entry<Traits>(p, token, first), producer_entry<Traits>(p, token, first + 1)};
}

// Copies the column entries of the chunk at `column0` into staged.entry[slot]
// (lanes 0..7 of each warp, one entry each): they travel with the previous
// chunk's rows, so that issuing this chunk's row copies never waits on a load.
template <class Traits>
__device__ __forceinline__ void stage_chunk_entries(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                                    int column0, int slot) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane >= Traits::kGatherRowsPerWarp) return;
  const int offset = warp * Traits::kGatherRowsPerWarp + lane;
  const int column = column0 + offset;
  const bool has_entry = column_has_entry<Traits>(p, column);
  const int32_t* src = column_entry<Traits>(p, token, has_entry ? column : 0);
  ptx::cp_async_4(ptx::smem_address(&s.staged.entry[slot][offset]), src, has_entry ? 4u : 0u);
}

// This thread's gather lane's entry in staged.entry[slot] (-1 without one).
template <class Traits>
__device__ __forceinline__ int32_t staged_entry(const ChunkSmem<Traits>& s, const Dsv4Params& p, int column0,
                                                int slot) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int offset = warp * Traits::kGatherRowsPerWarp + lane % Traits::kGatherRowsPerWarp;
  return column_has_entry<Traits>(p, column0 + offset) ? s.staged.entry[slot][offset] : -1;
}

// A row copy a lane issues later: see gather_chunk.
struct PendingRow {
  const uint8_t* src = nullptr;
  uint32_t dst = 0;
  uint32_t barrier = 0;
  uint32_t bytes = 0;  // 0: nothing pending
};

__device__ __forceinline__ void issue_pending_row(const PendingRow& row) {
  if (row.bytes != 0) ptx::cp_async_bulk_g2s(row.dst, row.src, row.bytes, row.barrier);
}

// One warp's rows [first_row, first_row + kRows) of a chunk into KV tile
// `kv_tile` (row-major, padded rows) by bulk copies: lane l < kRows copies
// row first_row + l, the index of its `entry` (one 512- or 1024-byte
// copy), completing on rows_landed[kv_tile] (one arrival a warp, with the
// bytes it copies).
// Rows not copied (masked columns) are zero-filled by the warp first, so
// NaN in their rows never reaches the MMAs; the warp writes their bytes of
// the column mask. The issuing lanes do not wait for the copies. Lanes from
// `issue_now` on return their copy instead of issuing it (the caller issues
// it later with issue_pending_row, before the tile's wait).
template <class Traits, int kRows>
__device__ __forceinline__ PendingRow copy_rows(ChunkSmem<Traits>& s, const Dsv4Params& p, int first_row, int column0,
                                                int32_t entry, int len, int window, bool count_out_of_range,
                                                int kv_tile, int issue_now = kRows) {
  static_assert(kRows % 8 == 0 && kRows <= 16, "whole bytes of the column mask; rows are bits of a ballot");
  constexpr uint32_t kRowBits = (1u << kRows) - 1;
  const int lane = threadIdx.x % 32;
  const int column = column0 + first_row + lane % kRows;
  const int32_t index = entry_index<Traits>(p, column, entry);
  const bool swa = column < kSwaColumns;
  const int64_t rows = swa ? p.swa.rows : p.compressed.rows;
  const bool listed = index >= 0 && column < len && (!swa || column < window);
  const bool active = listed && index < rows;
  if (listed && !active && lane < kRows && count_out_of_range) atomicAdd(p.out_of_range_count, 1);
  __syncwarp();  // reconverge before the ballots
  const bool load = active && !instrument::skips(p, instrument::kSkipRowLoads);
  const uint32_t mask = __ballot_sync(0xffffffffu, active) & kRowBits;
  const uint32_t copied = __ballot_sync(0xffffffffu, load) & kRowBits;
  if (lane < kRows / 8) s.column_mask[kv_tile][first_row / 8 + lane] = static_cast<uint8_t>(mask >> (8 * lane));
  for (uint32_t zero = ~copied & kRowBits; zero != 0; zero &= zero - 1) {
    const int row = first_row + __ffs(zero) - 1;
#pragma unroll
    for (int part = 0; part < Traits::kRowBytes / 512; ++part) {
      ptx::st_shared_zero16(ptx::smem_address(&s.kv[kv_tile][row][part * 512 + lane * 16]));
    }
  }
  __syncwarp();  // the zeros and the mask before the arrival that publishes the tile
  const uint32_t barrier = ptx::smem_address(&s.rows_landed[kv_tile]);
  if (lane == 0) ptx::mbarrier_arrive_expect_tx(barrier, __popc(copied) * Traits::kRowBytes);
  __syncwarp();  // the expected bytes before any copy completes
  PendingRow row;
  if (lane < kRows && load) {
    row.src = swa ? p.swa.data + row_offset(p.swa, index) : p.compressed.data + row_offset(p.compressed, index);
    row.dst = ptx::smem_address(&s.kv[kv_tile][first_row + lane][0]);
    row.barrier = barrier;
    row.bytes = Traits::kRowBytes;
    if (lane < issue_now) {
      issue_pending_row(row);
      row.bytes = 0;
    }
  }
  return row;
}

// The chunk's rows by the math warps: warp w copies rows 8w..8w+7 (copy_rows).
template <class Traits>
__device__ __forceinline__ PendingRow gather_chunk(ChunkSmem<Traits>& s, const Dsv4Params& p, int column0,
                                                   int32_t entry, int len, int window, bool count_out_of_range,
                                                   int kv_tile, int issue_now = Traits::kGatherRowsPerWarp) {
  constexpr int kRows = Traits::kGatherRowsPerWarp;
  return copy_rows<Traits, kRows>(s, p, threadIdx.x / 32 * kRows, column0, entry, len, window, count_out_of_range,
                                  kv_tile, issue_now);
}

// With a producer warpgroup: producer warp w copies rows kProducerRows * w
// .. + kProducerRows - 1 of the chunk, issuing every copy at once.
template <class Traits>
__device__ __forceinline__ void produce_chunk(ChunkSmem<Traits>& s, const Dsv4Params& p, int column0, int32_t entry,
                                              int len, int window, bool count_out_of_range, int kv_tile) {
  constexpr int kRows = Traits::kProducerRows;
  copy_rows<Traits, kRows>(s, p, (threadIdx.x / 32 - Traits::kFirstProducerWarp) * kRows, column0, entry, len, window,
                           count_out_of_range, kv_tile);
}

}  // namespace sparse_decode::dsv4
