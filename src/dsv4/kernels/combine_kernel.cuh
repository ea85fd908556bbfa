// The combine kernel of the split path: launched after the split kernel
// with PDL, it folds a unit's column groups from the workspace in group
// order with fold_groups, the cluster kernel's fold, so the bits equal the
// other kernels'. docs/kernels/split.md explains the design and its
// measurements.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/kernels/split_workspace.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/fold.cuh"
#include "dsv4/steps/query.cuh"
#include "dsv4/steps/token_address.cuh"

namespace sparse_decode::dsv4 {

// One CTA a (unit, slice) of kHeads x kGranules / kSlices threads: thread t
// folds head t % kHeads of granule (t / kHeads) * kSlices + slice over the
// unit's groups (16 heads: 8 slices of 16 granules, or 32 of 4 for a few
// units; 64 heads: 32 slices of 4).
template <class Traits, int kSlices>
__global__ void __launch_bounds__(Traits::kHeads * Traits::kGranules / kSlices)
    combine_kernel(const __grid_constant__ Dsv4Params p) {
  constexpr int kHeads = Traits::kHeads;
  const int64_t unit = blockIdx.x / kSlices;
  const int slice = static_cast<int>(blockIdx.x % kSlices);
  const int64_t token = unit / p.head_groups;
  const HeadGroup heads = head_group<kHeads>(p, static_cast<int>(unit % p.head_groups));
  const int head = threadIdx.x % kHeads;
  if (instrument::skips(p, instrument::kSkipAll | instrument::kSkipCombine)) return;
  instrument::phase_stamp(instrument::phase_clocks::kCombineRow + blockIdx.x, 0);

  // As in the other kernels the sinks are read before the dependency wait;
  // __fmul_rn: the product is rounded as the others round it into shared memory.
  const float sink_log2 =
      __fmul_rn(p.sinks && head < heads.count ? p.sinks[heads.first + head] : -INFINITY, kLog2e);
  uint16_t* out_head = p.out + token_offset<Traits>(p, token, p.out_token_stride, p.out_request_stride) +
                       (heads.first + head) * p.out_head_stride;
  float* lse_head = p.lse && slice == 0 && threadIdx.x < heads.count
                        ? p.lse + token_offset<Traits>(p, token, p.lse_token_stride, p.lse_request_stride) +
                              heads.first + threadIdx.x
                        : nullptr;
  const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + heads.first + head : nullptr;  // stored_lse
  ptx::grid_dependency_wait();  // the split kernel's results are complete and visible
  ptx::launch_dependents();
  instrument::phase_stamp(instrument::phase_clocks::kCombineRow + blockIdx.x, 1);
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
  const float2* stats = split_stats<Traits>(p, unit, 0);
  const float4* values = split_values<Traits>(p, unit, 0);
  constexpr int kGroupGranules = static_cast<int>(SplitWorkspace<Traits>::kValueBytes / sizeof(float4));
  with_group_count<Traits::kMaxGroups>(p.column_groups, [&](auto count) {
    constexpr int kGroups = decltype(count)::value;
    fold_groups<Traits, kGroups>(
        kGroups, slice, kSlices, heads.count, sink_log2, bmm2, out_head, lse_head, lse_sink,
        [&](int c) { return stats[c * kHeads + head]; },
        [&](int c, int local) { return values[c * kGroupGranules + (local * kSlices + slice) * kHeads + head]; });
  });
  instrument::phase_stamp(instrument::phase_clocks::kCombineRow + blockIdx.x, 2);
}

}  // namespace sparse_decode::dsv4
