// Host-side validation of DsaDecodeArgs: everything that can be checked
// without reading the caller's arrays, before anything is launched.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/validation.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode {
namespace {

using validation::aligned16;
using validation::aligned4;
using validation::invalid;
using validation::multiple_of_16_bytes;
using validation::saturating_add;
using validation::saturating_mul;

constexpr int64_t kBf16Bytes = 2;

// q and out: BF16 [rows, heads, 192], dims contiguous. `written` (out) must
// not overlap itself; q may broadcast with a zero stride.
Status check_rows(const std::string& name, const void* data, int64_t row_stride, int64_t head_stride,
                  int64_t heads, bool written) {
  if (data == nullptr) return invalid(name, ": expected a non-null pointer");
  if (!aligned16(data)) return invalid(name, ": expected a 16-byte aligned pointer");
  if (head_stride < (written ? kDsaHeadDim : 0) || !multiple_of_16_bytes(head_stride, kBf16Bytes)) {
    return invalid(name, "_head_stride: expected ", written ? ">= 192 elements and " : ">= 0 and ",
                   "a multiple of 8 elements (16 bytes), got ", head_stride);
  }
  const int64_t extent = saturating_add(saturating_mul(heads - 1, head_stride), kDsaHeadDim);
  if (row_stride < (written ? extent : 0) || !multiple_of_16_bytes(row_stride, kBf16Bytes)) {
    return invalid(name, "_row_stride: expected ",
                   written ? ">= (heads - 1) * head_stride + 192 = " + std::to_string(extent) : ">= 0",
                   " and a multiple of 8 elements (16 bytes), got ", row_stride);
  }
  return Status::Ok();
}

Status check_cache(const DsaDecodeArgs& a) {
  if (a.cache_dtype != DType::kBFloat16 && a.cache_dtype != DType::kFloat8E4M3) {
    return invalid("cache_dtype: expected kBFloat16 or kFloat8E4M3, got ", static_cast<int>(a.cache_dtype));
  }
  const int64_t bytes = a.cache_dtype == DType::kFloat8E4M3 ? 1 : 2;
  if (a.cache == nullptr) return invalid("cache: expected a non-null pointer");
  if (!aligned16(a.cache)) return invalid("cache: expected a 16-byte aligned pointer");
  if (a.num_pages < 1) return invalid("num_pages: expected >= 1, got ", a.num_pages);
  if (a.cache_slot_stride < kDsaSlotDim || !multiple_of_16_bytes(a.cache_slot_stride, bytes)) {
    return invalid("cache_slot_stride: expected >= 384 elements and a multiple of 16 bytes, got ",
                   a.cache_slot_stride);
  }
  const int64_t group_extent = saturating_mul(a.block_size, a.cache_slot_stride);
  if (a.cache_group_stride < group_extent || !multiple_of_16_bytes(a.cache_group_stride, bytes)) {
    return invalid("cache_group_stride: expected >= block_size * cache_slot_stride = ", group_extent,
                   " elements and a multiple of 16 bytes, got ", a.cache_group_stride);
  }
  const int64_t page_extent = saturating_mul(a.num_groups, a.cache_group_stride);
  if (a.cache_page_stride < page_extent || !multiple_of_16_bytes(a.cache_page_stride, bytes)) {
    return invalid("cache_page_stride: expected >= num_groups * cache_group_stride = ", page_extent,
                   " elements and a multiple of 16 bytes, got ", a.cache_page_stride);
  }
  if (saturating_mul(saturating_mul(a.num_pages, a.cache_page_stride), bytes) == std::numeric_limits<int64_t>::max()) {
    return invalid("num_pages: expected num_pages * cache_page_stride to fit in 64-bit byte offsets, got ", a.num_pages,
                   " pages of ", a.cache_page_stride, " elements");
  }
  if (a.cache_dtype == DType::kFloat8E4M3) {
    if (a.k_scale == nullptr) return invalid("k_scale: expected a non-null pointer with an FP8 cache");
    if (a.v_scale == nullptr) return invalid("v_scale: expected a non-null pointer with an FP8 cache");
  }
  if (!aligned4(a.k_scale)) return invalid("k_scale: expected a 4-byte aligned pointer");
  if (!aligned4(a.v_scale)) return invalid("v_scale: expected a 4-byte aligned pointer");
  return Status::Ok();
}

Status check_tables(const DsaDecodeArgs& a) {
  if (a.block_table == nullptr) return invalid("block_table: expected a non-null pointer");
  if (!aligned4(a.block_table)) return invalid("block_table: expected a 4-byte aligned pointer");
  if (a.max_blocks < 1) return invalid("max_blocks: expected >= 1, got ", a.max_blocks);
  if (a.block_table_stride < a.max_blocks) {
    return invalid("block_table_stride: expected >= max_blocks = ", a.max_blocks, ", got ", a.block_table_stride);
  }
  const int64_t rows_per_request = int64_t{a.num_groups} * a.query_len;
  if (a.num_rows % rows_per_request != 0) {
    return invalid("num_rows: expected a multiple of num_groups * query_len = ", rows_per_request, ", got ",
                   a.num_rows);
  }
  const int64_t requests = a.num_rows / rows_per_request;
  if (a.num_requests < requests) {
    return invalid("num_requests: expected >= num_rows / (num_groups * query_len) = ", requests, ", got ",
                   a.num_requests);
  }
  if (a.regions == nullptr) return invalid("regions: expected a non-null pointer");
  if (!aligned4(a.regions)) return invalid("regions: expected a 4-byte aligned pointer");
  if (a.regions_stride < a.num_regions) {
    return invalid("regions_stride: expected >= num_regions = ", a.num_regions, ", got ", a.regions_stride);
  }
  const struct {
    const int32_t* pointer;
    const char* name;
  } per_row[] = {{a.positions, "positions"}, {a.active, "active"}};
  for (const auto& array : per_row) {
    if (array.pointer == nullptr) return invalid(array.name, ": expected a non-null pointer");
    if (!aligned4(array.pointer)) return invalid(array.name, ": expected a 4-byte aligned pointer");
  }
  return Status::Ok();
}

Status check_gate(const DsaDecodeArgs& a) {
  if (a.gate_dtype != DsaGateDType::kBFloat16 && a.gate_dtype != DsaGateDType::kFloat32 &&
      a.gate_dtype != DsaGateDType::kFloat16) {
    return invalid("gate_dtype: expected kBFloat16, kFloat32 or kFloat16, got ", static_cast<int>(a.gate_dtype));
  }
  if (a.gate == nullptr) return Status::Ok();
  const int64_t bytes = a.gate_dtype == DsaGateDType::kFloat32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(a.gate) % bytes != 0) {
    return invalid("gate: expected a ", bytes, "-byte aligned pointer");
  }
  const int64_t width = int64_t{a.num_groups} * a.num_heads;
  if (a.gate_token_stride < width) {
    return invalid("gate_token_stride: expected >= num_groups * num_heads = ", width, ", got ",
                   a.gate_token_stride);
  }
  return Status::Ok();
}

}  // namespace

int32_t dsa_splits_for(int64_t rows) {
  int32_t splits = 1;
  while (splits < kDsaMaxSplits && rows * splits * 2 <= 256) splits *= 2;
  return splits;
}

Status validate(const DsaDecodeArgs& a) {
  if (a.memory != MemorySpace::kDevice && a.memory != MemorySpace::kHost) {
    return invalid("memory: expected kDevice or kHost, got ", static_cast<int>(a.memory));
  }
  if (a.num_rows < 0) return invalid("num_rows: expected >= 0, got ", a.num_rows);
  if (a.num_groups < 1) return invalid("num_groups: expected >= 1, got ", a.num_groups);
  if (a.num_heads < 1 || a.num_heads > kDsaMaxHeads) {
    return invalid("num_heads: expected 1..16 query heads per group, got ", a.num_heads);
  }
  if (a.block_size < 1) return invalid("block_size: expected >= 1, got ", a.block_size);
  if (a.num_regions < 1) return invalid("num_regions: expected >= 1, got ", a.num_regions);
  if (a.query_len < 1) return invalid("query_len: expected >= 1, got ", a.query_len);
  if (a.splits < 1 || a.splits > kDsaMaxSplits) {
    return invalid("splits: expected 1..32 (dsa_splits_for(num_rows) = ", dsa_splits_for(a.num_rows),
                   "), got ", a.splits);
  }
  if (std::isnan(a.scale)) return invalid("scale: expected a number, got NaN");
  if (a.kernel != DsaKernel::kAuto && a.kernel != DsaKernel::kStaged && a.kernel != DsaKernel::kDirect &&
      a.kernel != DsaKernel::kDirectCluster) {
    return invalid("kernel: expected kAuto, kStaged, kDirect or kDirectCluster, got ", static_cast<int>(a.kernel));
  }
  if ((a.kernel == DsaKernel::kDirect || a.kernel == DsaKernel::kDirectCluster) &&
      a.cache_dtype != DType::kFloat8E4M3) {
    return invalid(a.kernel == DsaKernel::kDirect ? "kernel: kDirect" : "kernel: kDirectCluster",
                   " expects cache_dtype kFloat8E4M3, got ", static_cast<int>(a.cache_dtype));
  }
  if (a.kernel == DsaKernel::kDirectCluster && std::min(a.splits, a.num_regions) > kDsaMaxClusterSplits) {
    return invalid("splits: kDirectCluster runs at most ", kDsaMaxClusterSplits,
                   " splits a row (one cluster), got min(splits, num_regions) = min(", a.splits, ", ",
                   a.num_regions, ")");
  }
  if (a.num_rows == 0) return Status::Ok();  // nothing is read or written

  if (Status s = check_rows("q", a.q, a.q_row_stride, a.q_head_stride, a.num_heads, false); !s.ok()) return s;
  if (Status s = check_rows("out", a.out, a.out_row_stride, a.out_head_stride, a.num_heads, true); !s.ok()) {
    return s;
  }
  if (Status s = check_cache(a); !s.ok()) return s;
  if (Status s = check_tables(a); !s.ok()) return s;
  return check_gate(a);
}

}  // namespace sparse_decode
