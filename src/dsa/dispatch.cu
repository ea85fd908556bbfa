// The plan of a dsa_decode call (the splits the kernels run, the kernel
// parameters) and the support check.
#include "dsa/dispatch.h"

#include <algorithm>
#include <climits>
#include <string>

#include "common/device_support.h"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

int32_t launched_splits(const DsaDecodeArgs& a) {
  return a.splits <= 1 ? a.splits : std::max(kMinCombinedSplits, std::min(a.splits, a.num_regions));
}

bool uses_direct_kernel(const DsaDecodeArgs& a) {
  return a.kernel != DsaKernel::kStaged && a.cache_dtype == DType::kFloat8E4M3;
}

bool uses_cluster_fold(const DsaDecodeArgs& a) {
  const int32_t splits = launched_splits(a);
  if (a.kernel == DsaKernel::kDirectCluster) return splits > 1;
  return a.kernel == DsaKernel::kAuto && splits >= kClusterFoldMinSplits && splits <= kDsaMaxClusterSplits &&
         splits <= largest_cluster_fold(a.cache_dtype);
}

bool uses_shared_tiles(const DsaDecodeArgs& a) {
  const int32_t splits = std::max(1, launched_splits(a));
  return region_key_shift(a.block_size) != kRegionAlone && (a.num_regions + splits - 1) / splits >= 2;
}

DsaParams make_params(const DsaDecodeArgs& a, void* workspace) {
  const int64_t element = a.cache_dtype == DType::kFloat8E4M3 ? 1 : 2;
  DsaParams p = {};
  p.q = static_cast<const uint16_t*>(a.q);
  p.q_row_stride = a.q_row_stride;
  p.q_head_stride = a.q_head_stride;
  p.out = static_cast<uint16_t*>(a.out);
  p.out_row_stride = a.out_row_stride;
  p.out_head_stride = a.out_head_stride;
  p.cache = static_cast<const uint8_t*>(a.cache);
  p.page_stride = a.cache_page_stride * element;
  p.group_stride = a.cache_group_stride * element;
  p.slot_stride = a.cache_slot_stride * element;
  p.num_pages = a.num_pages;
  p.block_size = a.block_size;
  p.region_shift = uses_shared_tiles(a) ? region_key_shift(a.block_size) : kRegionAlone;
  p.k_scale = a.k_scale;
  p.v_scale = a.v_scale;
  p.block_table = a.block_table;
  p.block_table_stride = a.block_table_stride;
  p.max_blocks = a.max_blocks;
  p.query_len = a.query_len;
  p.groups = a.num_groups;
  p.heads = a.num_heads;
  p.regions = a.regions;
  p.regions_stride = a.regions_stride;
  p.num_regions = a.num_regions;
  p.positions = a.positions;
  p.active = a.active;
  p.clear_inactive = a.clear_inactive ? 1 : 0;
  p.scale = a.scale;
  p.splits = launched_splits(a);
  p.gate = a.gate;
  p.gate_dtype = static_cast<int32_t>(a.gate_dtype);
  p.gate_token_stride = a.gate_token_stride;
  p.rows = a.num_rows;
  if (p.splits > 1) {
    p.partial = static_cast<float*>(workspace);
    p.lse = p.partial + a.num_rows * p.splits * a.num_heads * kDsaHeadDim;
  }
  return p;
}

Status kernels_support(const DsaDecodeArgs& args) {
  if (Status status = hopper_device_status("dsa_decode: "); !status.ok()) return status;
  if (args.num_rows > INT_MAX / args.splits) {
    return Status::NotSupported("dsa_decode: num_rows * splits must be at most 2^31 - 1 CTAs, got num_rows = " +
                                std::to_string(args.num_rows) + ", splits = " + std::to_string(args.splits));
  }
  if (args.splits > 1 && args.num_rows > INT_MAX / CombineTraits::kSlices) {
    return Status::NotSupported("dsa_decode: num_rows must be at most (2^31 - 1) / " +
                                std::to_string(CombineTraits::kSlices) + " with splits > 1 (combine CTAs), got " +
                                std::to_string(args.num_rows));
  }
  const int32_t splits = launched_splits(args);
  if (args.kernel == DsaKernel::kDirectCluster && splits > 1) {
    if (const int32_t largest = largest_cluster_fold(DType::kFloat8E4M3); splits > largest) {
      return Status::NotSupported("kernel: kDirectCluster runs a row's " + std::to_string(splits) +
                                  " splits as one cluster; this device schedules clusters of at most " +
                                  std::to_string(largest) + " of its CTAs (kDirect and kAuto run everywhere)");
    }
  }
  return Status::Ok();
}

}  // namespace sparse_decode::dsa
