// What the dsa_decode kernels read (docs/kernels/dsa.md): DsaDecodeArgs
// with byte strides for the cache and the workspace split into its arrays.
#pragma once

#include <cstdint>

#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::dsa {

struct DsaParams {
  const uint16_t* q;       // [rows, heads, 192] bfloat16
  int64_t q_row_stride;    // elements
  int64_t q_head_stride;   // elements
  uint16_t* out;           // [rows, heads, 192] bfloat16
  int64_t out_row_stride;  // elements
  int64_t out_head_stride; // elements

  const uint8_t* cache;       // [pages, G, block, 384] of BF16 or FP8 E4M3
  int64_t page_stride;        // bytes
  int64_t group_stride;       // bytes
  int64_t slot_stride;        // bytes
  int64_t num_pages;
  int32_t block_size;
  const float* k_scale;       // FP8 only
  const float* v_scale;       // FP8 only

  const int32_t* block_table;  // [requests, max_blocks]
  int64_t block_table_stride;
  int32_t max_blocks;
  int32_t query_len;
  int32_t groups;  // G
  int32_t heads;   // query heads a group, 1..16

  const int32_t* regions;  // [rows, R]
  int64_t regions_stride;
  int32_t num_regions;

  const int32_t* positions;  // [rows]
  const int32_t* active;     // [rows]
  int32_t clear_inactive;

  float scale;
  int32_t splits;

  const void* gate;  // optional [tokens, G * heads]
  int32_t gate_dtype;  // DsaGateDType
  int64_t gate_token_stride;

  float* partial;  // splits > 1: [rows, splits, heads, 192] normalized outputs
  float* lse;      // splits > 1: [rows, splits, heads] natural-log sums of exp (-inf: no key)
  int64_t rows;
  int32_t region_shift;  // 64 >> shift regions a tile: region_key_shift(block_size) or kRegionAlone (uses_shared_tiles)
};

}  // namespace sparse_decode::dsa
