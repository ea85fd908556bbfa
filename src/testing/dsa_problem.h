// Synthetic region-paged DSA decode problems (SPEC section 4) on the host,
// for the tests: random non-zero BF16/FP8 data, a shuffled block table per
// request, causal positions (a request's query_len tokens end its context),
// random region selections with unused (-1), invisible (past the position)
// and out-of-range ids, inactive rows (row 0 is always active with keys),
// and NaN in every cache slot that no visible key reads and in every input
// an inactive row would not read.
#pragma once

#include <cstdint>
#include <vector>

#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::testing {

struct DsaProblemConfig {
  int32_t requests = 2;
  int32_t query_len = 1;   // tokens per request
  int32_t groups = 2;      // G
  int32_t heads = 16;      // per group
  int32_t block_size = 16;
  int32_t regions = 8;     // R: region columns per row
  int32_t max_blocks = 16; // logical blocks per request (the context is at most max_blocks * block_size)
  DType cache_dtype = DType::kBFloat16;
  bool gate = true;
  DsaGateDType gate_dtype = DsaGateDType::kBFloat16;
  double unused_fraction = 0.2;     // region columns set to -1
  double invisible_fraction = 0.1;  // region columns naming a block past the row's position
  double bad_id_fraction = 0.05;    // region columns with an id outside [0, max_blocks) (masked)
  double empty_fraction = 0.1;      // active rows without any visible key
  double inactive_fraction = 0.2;   // rows with active = 0
  bool strided = false;             // padded strides everywhere (q, cache, tables, gate)
  int32_t splits = 1;
  bool clear_inactive = true;
  uint64_t seed = 1;
};

struct DsaProblem {
  DsaProblemConfig config;
  std::vector<uint16_t> q;        // [rows, q_row_stride] bfloat16 bits
  std::vector<uint8_t> cache;     // pages * page_stride elements of cache_dtype
  std::vector<int32_t> block_table;  // [requests, block_table_stride]
  std::vector<int32_t> regions;   // [rows, regions_stride]
  std::vector<int32_t> positions; // [rows]
  std::vector<int32_t> active;    // [rows]
  std::vector<uint8_t> gate;      // [tokens, gate_token_stride] of gate_dtype (empty without gate)
  int64_t pages = 0;
  float k_scale = 1.0f, v_scale = 1.0f;  // used with FP8
  float scale = 0.0f;

  // Strides (elements) of this problem's arrays.
  int64_t q_head_stride = kDsaHeadDim, q_row_stride = 0;
  int64_t slot_stride = kDsaSlotDim, group_stride = 0, page_stride = 0;
  int64_t block_table_stride = 0, regions_stride = 0, gate_token_stride = 0;

  int64_t rows() const { return int64_t{config.requests} * config.query_len * config.groups; }
  int64_t element_bytes() const { return config.cache_dtype == DType::kFloat8E4M3 ? 1 : 2; }

  // Arguments over this problem's host vectors; out is the caller's
  // contiguous [rows, heads, 192] bfloat16 buffer.
  DsaDecodeArgs host_args(void* out) const;

  // Sets K and V of slot `slot` of (page, group) to fresh random values.
  void fill_slot(int64_t page, int32_t group, int32_t slot, uint64_t seed);
};

DsaProblem make_dsa_problem(const DsaProblemConfig& config);

}  // namespace sparse_decode::testing
