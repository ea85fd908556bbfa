// The packed cluster kernel's rows: gathered by cp.async, then dequantized
// to BF16 in the KV tile, each warp its own 8 rows.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/cluster/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::cluster {

// Gathers the chunk's rows: warp w takes rows 8w..8w+7. Lanes 0..7 load
// one index each; every lane then copies 9 of the warp's 8 x 36 16-byte
// pieces (FP8 bytes to the staging area, BF16 dims straight to the KV tile) and
// lanes 0..7 their row's scale bytes. Masked columns read nothing and are
// zero-filled (scale byte 0 and FP8 0 dequantize to 0), so NaN in their rows
// never reaches an MMA. Returns the warp's active rows, bit r for row 8w + r.
// The general form (kGeneral) reads the token's index row at `token_row`
// and masks SWA columns c < 128 past `window` (pass 128 for no window).
template <bool kGeneral>
__device__ __forceinline__ uint32_t gather_rows(ClusterSmem& s, const SegmentParams& seg, int64_t token,
                                                int64_t token_row, int column0, int len, int window,
                                                bool count_out_of_range, int32_t* out_of_range_count) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int column = column0 + warp * Traits::kGatherRowsPerWarp + lane;
  bool active = false;
  const uint8_t* data = seg.pool;
  const uint8_t* scales = seg.pool;
  bool listed = lane < Traits::kGatherRowsPerWarp && column < seg.width && column < len;
  if constexpr (kGeneral) listed = listed && in_window(column, window);
  if (listed) {
    const int32_t index = seg.indices[(kGeneral ? token_row : token * seg.indices_stride) + column];
    active = index >= 0 && index < seg.rows;
    if (index >= 0 && !active && count_out_of_range && out_of_range_count) atomicAdd(out_of_range_count, 1);
    if (active) {
      const uint32_t page = static_cast<uint32_t>(index) / seg.page_size;
      const uint32_t slot = static_cast<uint32_t>(index) - page * seg.page_size;
      const uint8_t* page_base = seg.pool + page * seg.page_stride;
      data = page_base + slot * int64_t{kPackedDataBytes};
      scales = page_base + seg.scale_offset + slot * int64_t{kPackedScaleBytes};
    }
  }
  const uint32_t mask = __ballot_sync(0xffffffffu, active);
  const int row0 = warp * Traits::kGatherRowsPerWarp;
#pragma unroll
  for (int i = 0; i < Traits::kGatherRowsPerWarp * Traits::kRowPieces / 32; ++i) {
    const int item = i * 32 + lane;
    const int r = item / Traits::kRowPieces, piece = item % Traits::kRowPieces;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(data), r));
    const bool load = (mask >> r) & 1u;
    const uint32_t dst = piece < Traits::kFp8Pieces
                             ? ptx::smem_address(&s.raw.fp8[row0 + r][piece * 16])
                             : ptx::smem_address(&s.kv[row0 + r][kPackedFp8Dims + (piece - Traits::kFp8Pieces) * 8]);
    ptx::cp_async_16(dst, load ? src + piece * 16 : seg.pool, load ? 16u : 0u);
  }
  if (lane < Traits::kGatherRowsPerWarp) {
    ptx::cp_async_8(ptx::smem_address(&s.raw.scales[row0 + lane][0]), scales, active ? 8u : 0u);
  }
  return mask;
}

// The warp's 8 rows: FP8 bytes times their scale tile's UE8M0 scale, to
// BF16 in the KV tile. Exact (an E4M3 value has 4 significant bits, BF16 8) except
// below BF16's subnormal range. 8 bytes a lane and step, consecutive lanes
// consecutive bytes of a row.
__device__ __forceinline__ void dequantize_rows(ClusterSmem& s) {
  constexpr int kItems = Traits::kGatherRowsPerWarp * Traits::kDequantizeStepsPerRow;
  static_assert(kItems % 32 == 0, "whole steps");
  const int row0 = threadIdx.x / 32 * Traits::kGatherRowsPerWarp, lane = threadIdx.x % 32;
#pragma unroll 2
  for (int i = 0; i < kItems / 32; ++i) {
    const int item = i * 32 + lane;
    const int row = row0 + item / Traits::kDequantizeStepsPerRow, step = item % Traits::kDequantizeStepsPerRow;
    const uint2 bytes = *reinterpret_cast<const uint2*>(&s.raw.fp8[row][step * 8]);
    const uint32_t byte = s.raw.scales[row][step * 8 / kPackedTileDims];
    // 2^(byte - 127) as a float: byte 0 is the subnormal 2^-127, byte 255 is NaN (as in UE8M0).
    const float scale = __uint_as_float(byte == 0 ? 0x00400000u : byte == 255 ? 0x7fc00000u : byte << 23);
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = j < 2 ? bytes.x : bytes.y;
      const __half2_raw halves =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * (j % 2))), __NV_E4M3);
      const float2 values = __half22float2(*reinterpret_cast<const __half2*>(&halves));
      packed[j] = ptx::bf16x2_bits(values.x * scale, values.y * scale);
    }
    *reinterpret_cast<uint4*>(&s.kv[row][step * 8]) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

}  // namespace sparse_decode::dsv4_packed::cluster
