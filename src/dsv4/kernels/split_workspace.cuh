// The split path's workspace as its kernels address it (the layout:
// SplitWorkspace): where the split kernel writes a unit's column group
// results and the combine kernel reads them.
#pragma once

#include <cstdint>

#include "dsv4/params.h"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {

// Where unit u's group c keeps its P V sum and its statistics.
template <class Traits>
__device__ __forceinline__ float4* split_values(const Dsv4Params& p, int64_t unit, int group) {
  using Workspace = SplitWorkspace<Traits>;
  return reinterpret_cast<float4*>(p.workspace + (unit * p.column_groups + group) * Workspace::kValueBytes);
}

template <class Traits>
__device__ __forceinline__ float2* split_stats(const Dsv4Params& p, int64_t unit, int group) {
  using Workspace = SplitWorkspace<Traits>;
  const int64_t units = p.num_tokens * p.head_groups;
  return reinterpret_cast<float2*>(p.workspace + units * p.column_groups * Workspace::kValueBytes +
                                   (unit * p.column_groups + group) * Workspace::kStatsBytes);
}

}  // namespace sparse_decode::dsv4
