// The producer warpgroup of the packed stream kernel: each row's 576 data
// bytes by bulk copy into a KV tile, its scale bytes and the column mask.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::stream {

// Whether column `row` of chunk `chunk` is below its segment's width and len.
__device__ __forceinline__ bool column_listed(const Params& p, int chunk, int row, int swa_len, int extra_len) {
  const bool in_swa = chunk < p.swa.chunks;
  const int column = (in_swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns + row;
  return column < (in_swa ? p.swa.width : p.extra.width) && column < (in_swa ? swa_len : extra_len);
}

// The index of column `row` of chunk `chunk` of the token (-1 past the
// segment's width or its len).
__device__ __forceinline__ int32_t listed_index(const Params& p, int64_t token, int chunk, int row, int swa_len,
                                                int extra_len) {
  const bool in_swa = chunk < p.swa.chunks;
  const SegmentParams& seg = in_swa ? p.swa : p.extra;
  const int column = (in_swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns + row;
  return column_listed(p, chunk, row, swa_len, extra_len) ? seg.indices[token * seg.indices_stride + column] : -1;
}

// The general form's view of a token (request views, the seq_lens window):
// its rows of the segments' indices, its lens and its SWA window.
struct TokenColumns {
  int64_t swa_row, extra_row;  // offsets in the segments' indices
  int swa_len, extra_len;
  int window;                  // SWA columns c < 128 past it are masked
};

__device__ __forceinline__ bool column_listed(const Params& p, int chunk, int row, const TokenColumns& c) {
  const bool in_swa = chunk < p.swa.chunks;
  const int column = (in_swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns + row;
  return column_listed(p, chunk, row, c.swa_len, c.extra_len) && (!in_swa || in_window(column, c.window));
}

__device__ __forceinline__ int32_t listed_index(const Params& p, int chunk, int row, const TokenColumns& c) {
  const bool in_swa = chunk < p.swa.chunks;
  const SegmentParams& seg = in_swa ? p.swa : p.extra;
  const int column = (in_swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns + row;
  return column_listed(p, chunk, row, c) ? seg.indices[(in_swa ? c.swa_row : c.extra_row) + column] : -1;
}

// Producer warp w's rows 16w .. 16w + 15 of chunk i into KV tile i % kBuffers,
// once the math warps are done with the KV tile's previous chunk: a bulk copy
// of the 576 data bytes a row, and the row's 7 scale bytes (plain loads) as
// byte << 23. Masked rows are zero-filled, scales 0, so that NaN in unused
// slots never reaches an MMA. Arrivals on rows_landed: lane 0 with the
// expected bytes, then every lane after its scales, zeros and mask.
// S: the kernel's shared-memory plan (StreamSmem, or the 64-head form's,
// whose KV tiles, scales, barriers and producer warps are the same).
template <class S>
__device__ __forceinline__ void produce_chunk(S& s, const Params& p, int i, int chunk, int32_t index,
                                              bool count_out_of_range) {
  constexpr int kRows = Traits::kProducerRows;
  const int pw = threadIdx.x / 32 - Traits::kWarps, lane = threadIdx.x % 32;
  const int buffer = i % Traits::kBuffers;
  const int row = pw * kRows + lane % kRows;
  const SegmentParams& seg = chunk < p.swa.chunks ? p.swa : p.extra;
  const bool listed = lane < kRows && index >= 0;
  const bool active = listed && index < seg.rows;
  if (listed && !active && count_out_of_range) atomicAdd(p.out_of_range_count, 1);
  const uint8_t* data = nullptr;
  uint2 scale_bytes = make_uint2(0, 0);
  if (active) {
    const uint32_t page = static_cast<uint32_t>(index) / seg.page_size;
    const uint32_t slot = static_cast<uint32_t>(index) - page * seg.page_size;
    const uint8_t* page_base = seg.pool + page * seg.page_stride;
    data = page_base + slot * int64_t{kPackedDataBytes};
    scale_bytes = *reinterpret_cast<const uint2*>(page_base + seg.scale_offset + slot * int64_t{kPackedScaleBytes});
  }
  if (i >= Traits::kBuffers) {
    ptx::named_barrier_sync(Traits::kTileFreeBarrier + buffer, Traits::kLaunchThreads);
    // The KV tile's last use (generic proxy) before the bulk copies (async proxy) into it.
    ptx::fence_proxy_async_shared();
  }
  const uint32_t mask = __ballot_sync(0xffffffffu, active) & ((1u << kRows) - 1);
  const uint32_t barrier = ptx::smem_address(&s.rows_landed[buffer]);
  if (lane == 0) ptx::mbarrier_arrive_expect_tx(barrier, __popc(mask) * kPackedDataBytes);
  __syncwarp();  // the expected bytes before any copy completes
  if (active) ptx::cp_async_bulk_g2s(ptx::smem_address(&s.kv[buffer][row][0]), data, kPackedDataBytes, barrier);
  for (uint32_t zero = ~mask & ((1u << kRows) - 1); zero != 0; zero &= zero - 1) {
    const int r = pw * kRows + __ffs(zero) - 1;
    for (int byte = lane * 16; byte < kPackedDataBytes; byte += 32 * 16) {
      ptx::st_shared_zero16(ptx::smem_address(&s.kv[buffer][r][byte]));
    }
  }
  if (lane < kRows) {
#pragma unroll
    for (int t = 0; t < Traits::kScaleTiles; ++t) {
      const uint32_t byte = ((t < 4 ? scale_bytes.x : scale_bytes.y) >> (8 * (t % 4))) & 0xffu;
      s.scale_bits[buffer][t][row] = byte << 23;
    }
  }
  if (lane < kRows / 8) s.column_mask[buffer][pw * kRows / 8 + lane] = static_cast<uint8_t>(mask >> (8 * lane));
  // Every lane publishes its own scales, zeros and mask (a release arrival each).
  ptx::mbarrier_arrive(barrier);
}

// The token's chunks [first, first + count) by the producer warpgroup, each
// chunk's indices loaded a chunk ahead so that their latency hides behind
// the KV tile's wait. kIndexBeforeLens: the first chunk's indices load beside
// the lens (masked by them after), not after them (the split path, whose
// CTAs walk a chunk or two: one DRAM trip less before the first rows).
// kGeneral: the kernel's general form (request views, the seq_lens window);
// the plain form's instructions stay those of the calls without them.
template <bool kIndexBeforeLens, bool kGeneral, class S>
__device__ __forceinline__ void produce_chunks(S& s, const Params& p, int64_t token, int first, int count,
                                               bool count_out_of_range) {
  constexpr int kRows = Traits::kProducerRows;
  const int lane = threadIdx.x % 32;
  const int row = (threadIdx.x / 32 - Traits::kWarps) * kRows + lane % kRows;
  const int every = 1 << 30;  // a len above every width
  if constexpr (kGeneral) {
    TokenColumns c{indices_offset<true>(p, p.swa, p.swa_views, token),
                   indices_offset<true>(p, p.extra, p.extra_views, token), every, every, kSwaColumns};
    const int32_t early = kIndexBeforeLens && lane < kRows && count > 0 ? listed_index(p, first, row, c) : -1;
    c.swa_len = segment_len<true>(p, p.swa, p.swa_views, token, p.swa.width);
    c.extra_len = segment_len<true>(p, p.extra, p.extra_views, token, p.extra.width);
    c.window = swa_window(p, token);
    int32_t index = -1;
    if constexpr (kIndexBeforeLens) {
      index = column_listed(p, first, row, c) ? early : -1;
    } else {
      index = lane < kRows && count > 0 ? listed_index(p, first, row, c) : -1;
    }
    for (int i = 0; i < count; ++i) {
      const int32_t next = i + 1 < count && lane < kRows ? listed_index(p, first + i + 1, row, c) : -1;
      produce_chunk(s, p, i, first + i, index, count_out_of_range);
      if (i == 0) ptx::launch_dependents();
      index = next;
    }
    return;
  }
  const int32_t early =
      kIndexBeforeLens && lane < kRows && count > 0 ? listed_index(p, token, first, row, every, every) : -1;
  const int swa_len = p.swa.lens ? p.swa.lens[token] : p.swa.width;
  const int extra_len = p.extra.lens ? p.extra.lens[token] : p.extra.width;
  int32_t index = -1;
  if constexpr (kIndexBeforeLens) {
    index = column_listed(p, first, row, swa_len, extra_len) ? early : -1;
  } else {
    index = lane < kRows && count > 0 ? listed_index(p, token, first, row, swa_len, extra_len) : -1;
  }
  for (int i = 0; i < count; ++i) {
    const int32_t next =
        i + 1 < count && lane < kRows ? listed_index(p, token, first + i + 1, row, swa_len, extra_len) : -1;
    produce_chunk(s, p, i, first + i, index, count_out_of_range);
    if (i == 0) ptx::launch_dependents();
    index = next;
  }
}

}  // namespace sparse_decode::dsv4_packed::stream
