// The split kernel of dsv4_decode (the split path, T around 128): each run
// of column groups of a unit gets an ordinary CTA that walks
// the run's chunks as the other kernels do and writes each group's
// statistics and FP32 P V sum to the workspace; the combine kernel
// (combine_kernel.cuh) folds them. docs/kernels/split.md explains the design
// and its measurements.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/instrument.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/kernels/split_workspace.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/fold.cuh"
#include "dsv4/steps/query.cuh"
#include "dsv4/steps/token_scope.cuh"
#include "dsv4/steps/walk.cuh"
#include "dsv4/traits.cuh"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4 {

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
// GPU holds CTAs) walk with the traits' KV tiles (FP8: the next chunk's gather
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

}  // namespace sparse_decode::dsv4
