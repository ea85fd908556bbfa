// The stream kernel of dsv4_decode (large batches): one CTA a token walks
// all of its chunks, the next chunk's gather in flight during this one's
// math, and folds each group's mean output into registers in group order:
// the same groups and the same fold as the cluster kernel, so the bits agree.
// docs/kernels/large_batch.md explains the design and its measurements.
#pragma once

#include "dsv4/chunk_steps.cuh"

namespace sparse_decode::dsv4 {

__device__ __forceinline__ float round_to_f16(float value) { return __half2float(__float2half_rn(value)); }

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, resident_ctas(sizeof(StreamSmem<Traits>)))
    stream_kernel(const __grid_constant__ Dsv4Params p) {
  using Smem = StreamSmem<Traits>;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  ChunkSmem<Traits>& s = reinterpret_cast<Smem*>(smem_bytes)->chunk;
  const int64_t token = blockIdx.x / p.head_groups;
  const HeadGroup heads = head_group(p, static_cast<int>(blockIdx.x % p.head_groups));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (p.skip_stages & 8) return;

  const float sink = p.sinks && tid < heads.count ? p.sinks[heads.first + tid] : -INFINITY;
  ptx::grid_dependency_wait();
  load_query<Traits>(s, p, token, heads);
  const TokenScope scope = token_scope<Traits>(s, p, token, heads, true, sink);
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;

  // This thread's heads: lane / 4 (fragment elements 0, 1) and lane / 4 + 8 (2, 3).
  const int top_head = lane / 4, bottom_head = top_head + 8;
  FoldState top_state, bottom_state;
  OutputFragment<Traits> out = {};
  OutputFragment<Traits> acc = {};
  walk_chunks<Traits>(s, p, scope, 0, p.chunks, p.chunks_per_group, acc, [&](OutputFragment<Traits>& group) {
    const FoldWeights top_w = fold_group(top_state, s.running_max[top_head], s.running_sum[top_head]);
    const FoldWeights bottom_w = fold_group(bottom_state, s.running_max[bottom_head], s.running_sum[bottom_head]);
    const float top = mean_factor(s.running_sum[top_head]), bottom = mean_factor(s.running_sum[bottom_head]);
#pragma unroll
    for (int g = 0; g < Traits::kDimGroups; ++g)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int par = 0; par < 2; ++par) {
          float(&o)[4] = out[g][half][par];
          const float(&a)[4] = group[g][half][par];
          o[0] = fold_value(o[0], top_w, round_to_f16(a[0] * top));
          o[1] = fold_value(o[1], top_w, round_to_f16(a[1] * top));
          o[2] = fold_value(o[2], bottom_w, round_to_f16(a[2] * bottom));
          o[3] = fold_value(o[3], bottom_w, round_to_f16(a[3] * bottom));
        }
  });
  if (p.skip_stages & 4) return;

  const float top_scale = output_scale(top_state, s.sink_log2[top_head], bmm2);
  const float bottom_scale = output_scale(bottom_state, s.sink_log2[bottom_head], bmm2);
  uint16_t* out_token = p.out + token * p.out_token_stride + heads.first * p.out_head_stride;
  const bool bottom_exists = bottom_head < heads.count;  // not with H = 8
  if (p.lse && warp == 0 && lane % 4 == 0) {
    float* lse = p.lse + token * p.lse_token_stride + heads.first;
    lse[top_head] = output_lse(top_state);
    if (bottom_exists) lse[bottom_head] = output_lse(bottom_state);
  }
#pragma unroll
  for (int g = 0; g < Traits::kDimGroups; ++g)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // Granule lane % 4 of this 16-dim half: its values are (n-tile 0, n-tile 1) x
      // [0], [1] of the top head, [2], [3] of the bottom one.
      const int first_dim = warp * Traits::kDimsPerWarp + g * 32 + half * 16 + granule_dim<Traits>(lane % 4, 0);
      const float(&tile0)[4] = out[g][half][0];
      const float(&tile1)[4] = out[g][half][1];
      store_granule<Traits>(out_token + top_head * p.out_head_stride, first_dim, tile0[0] * top_scale,
                            tile1[0] * top_scale, tile0[1] * top_scale, tile1[1] * top_scale);
      if (!bottom_exists) continue;
      store_granule<Traits>(out_token + bottom_head * p.out_head_stride, first_dim, tile0[2] * bottom_scale,
                            tile1[2] * bottom_scale, tile0[3] * bottom_scale, tile1[3] * bottom_scale);
    }
}

}  // namespace sparse_decode::dsv4
