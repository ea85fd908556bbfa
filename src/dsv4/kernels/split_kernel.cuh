// The split path of dsv4_decode (issue #4, T around 128): the split kernel
// gives each run of groups of a (token, head group) an ordinary CTA that
// walks the run's chunks as the other kernels do and writes each group's
// statistics and FP32 P V sum to the workspace; the combine kernel, launched after it
// with PDL, folds a unit's groups in group order with fold_groups, the
// cluster kernel's fold, so the bits equal the other kernels'.
// docs/kernels/split.md explains the design and its measurements.
#pragma once

#include "common/math.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/steps/chunk_steps.cuh"

namespace sparse_decode::dsv4 {

// Where unit u's group c keeps its P V sum and its statistics.
template <class Traits>
__device__ __forceinline__ float4* split_values(const Dsv4Params& p, int64_t unit, int group) {
  using Workspace = SplitWorkspace<Traits>;
  return reinterpret_cast<float4*>(p.workspace + (unit * p.groups + group) * Workspace::kValueBytes);
}

template <class Traits>
__device__ __forceinline__ float2* split_stats(const Dsv4Params& p, int64_t unit, int group) {
  using Workspace = SplitWorkspace<Traits>;
  const int64_t units = p.num_tokens * p.head_groups;
  return reinterpret_cast<float2*>(p.workspace + units * p.groups * Workspace::kValueBytes +
                                   (unit * p.groups + group) * Workspace::kStatsBytes);
}

// Writes group `group` of the unit to the workspace: its (max, sum) per head
// (written before the walk's last barrier) and its P V sum.
template <class Traits>
__device__ __forceinline__ void write_group(const ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t unit, int group,
                                            const OutputFragment<Traits>& acc, int slot) {
  if (threadIdx.x < Traits::kHeads) {
    split_stats<Traits>(p, unit, group)[threadIdx.x] =
        make_float2(s.running_max[slot][threadIdx.x], s.running_sum[slot][threadIdx.x]);
  }
  float4* values = split_values<Traits>(p, unit, group);
  emit_group_values<Traits>(acc, [&](int granule, int head, float4 granule_values) {
    values[granule * Traits::kHeads + head] = granule_values;
  });
}

// One CTA a run of split_groups groups of a unit (the floats of the cluster
// kernel's CTA when the run is one group); longer runs (more tokens than the
// GPU holds CTAs) walk with the traits' tiles (FP8: the next chunk's gather
// in flight, as in the stream kernel) and write each group as it ends.
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, resident_ctas(sizeof(SplitSmem<Traits>)))
    split_kernel(const __grid_constant__ Dsv4Params p) {
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  ChunkSmem<Traits>& s = reinterpret_cast<SplitSmem<Traits>*>(smem_bytes)->chunk;
  const int64_t unit = blockIdx.x / p.split_ctas;  // token * head_groups + head group
  const int first_group = static_cast<int>(blockIdx.x % p.split_ctas) * p.split_groups;
  const int64_t token = unit / p.head_groups;
  const HeadGroup heads = head_group<Traits::kHeads>(p, static_cast<int>(unit % p.head_groups));
  if (instrument::skips(p, instrument::kSkipAll)) return;
  instrument::phase_span(0);

  ptx::grid_dependency_wait();
  load_query<Traits>(s, p, token, heads);
  const int first = first_group * p.chunks_per_group;
  const int count = min(p.split_groups * p.chunks_per_group, p.chunks - first);
  const bool has_swa_columns = first * Traits::kChunkColumns < kSwaColumns;
  // The sink enters in the combine kernel's fold only.
  const TokenScope scope =
      token_scope<Traits>(s, p, token, heads, has_swa_columns, -INFINITY, first * Traits::kChunkColumns);
  int group = first_group;
  instrument::phase_span(1);
  // Span marks 2 and 3 frame each group's write: the last group's remain.
  walk_groups<Traits>(s, p, scope, first, count, p.chunks_per_group, [&](OutputFragment<Traits>& result, int slot) {
    instrument::phase_span(2);
    write_group<Traits>(s, p, unit, group++, result, slot);
    instrument::phase_span(3);
  });
}

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
  uint16_t* out_head = p.out + token * p.out_token_stride + (heads.first + head) * p.out_head_stride;
  float* lse_head = p.lse && slice == 0 && threadIdx.x < heads.count
                        ? p.lse + token * p.lse_token_stride + heads.first + threadIdx.x
                        : nullptr;
  ptx::grid_dependency_wait();  // the split kernel's results are complete and visible
  ptx::launch_dependents();
  instrument::phase_stamp(instrument::phase_clocks::kCombineRow + blockIdx.x, 1);
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
  const float2* stats = split_stats<Traits>(p, unit, 0);
  const float4* values = split_values<Traits>(p, unit, 0);
  constexpr int kGroupGranules = static_cast<int>(SplitWorkspace<Traits>::kValueBytes / sizeof(float4));
  with_group_count<Traits::kMaxGroups>(p.groups, [&](auto count) {
    constexpr int kGroups = decltype(count)::value;
    fold_groups<Traits, kGroups>(
        kGroups, slice, kSlices, heads.count, sink_log2, bmm2, out_head, lse_head,
        [&](int c) { return stats[c * kHeads + head]; },
        [&](int c, int local) { return values[c * kGroupGranules + (local * kSlices + slice) * kHeads + head]; });
  });
  instrument::phase_stamp(instrument::phase_clocks::kCombineRow + blockIdx.x, 2);
}

}  // namespace sparse_decode::dsv4
