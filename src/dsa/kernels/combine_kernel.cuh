// The combine kernel of dsa_decode: merges a row's splits in split order.
#pragma once

#include <cstdint>

#include "common/ptx/load.cuh"
#include "common/ptx/sync.cuh"
#include "dsa/params.h"
#include "dsa/steps/gate.cuh"
#include "dsa/steps/output.cuh"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {

// kSlices CTAs a row, one output granule a thread: merges the row's splits
// in split order, applies the gate and stores BF16; zeroes inactive rows
// when asked (docs/formats/dsa_layout.md). Everything a thread reads (the
// row's flag, every split's lse, the gate inputs, its granule of every
// split's partial) is loaded at once after the dependency wait, one L2
// round trip; the weights then go through shared memory.
template <int kMaxSplits>
__global__ void __launch_bounds__(CombineTraits::kThreads) combine_kernel(const __grid_constant__ DsaParams p) {
  using T = TileTraits;
  using C = CombineTraits;
  static_assert(kMaxSplits <= kDsaMaxSplits && C::bound(kMaxSplits) == kMaxSplits,
                "an instance of CombineTraits::bound");
  __shared__ float weight[kMaxSplits][T::kHeads];  // exp(lse_s - max) of each split and head (0: empty)
  __shared__ float factor[T::kHeads];              // gate / sum of the weights; 0: no key in any split
  const int64_t row = blockIdx.x / C::kSlices;
  const int x = static_cast<int>(blockIdx.x % C::kSlices) * C::kThreads + threadIdx.x;  // (head, granule) pair
  const bool has_granule = x < p.heads * T::kGranules;
  const int head = has_granule ? x / T::kGranules : 0, dim = (x % T::kGranules) * 4;
  ptx::grid_dependency_wait();  // the split kernel's partials are complete and visible
  ptx::launch_dependents();
  // An inactive row's lse and partials are read but not used.
  const int64_t entry0 = row * p.splits * p.heads;  // (split s, head h): entry0 + s * heads + h
  const float* partial = p.partial + (entry0 + head) * T::kDims + dim;
  float4 part[kMaxSplits];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    part[s] = has_granule && s < p.splits
                  ? ptx::load_l2(reinterpret_cast<const float4*>(partial + int64_t{s} * p.heads * T::kDims))
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  constexpr int kLsePerThread = (kMaxSplits * T::kHeads + C::kThreads - 1) / C::kThreads;
  float lse[kLsePerThread];
#pragma unroll
  for (int u = 0; u < kLsePerThread; ++u) {
    const int i = threadIdx.x + u * C::kThreads;
    lse[u] = i < p.splits * p.heads ? ptx::load_l2(p.lse + entry0 + i) : -INFINITY;
  }
  const float gate_x = threadIdx.x < p.heads ? gate_input(p, row, threadIdx.x) : 0.0f;
  const bool active = ptx::load_l2(p.active + row) != 0;
  if (!active && !p.clear_inactive) return;
  if (active) {
#pragma unroll
    for (int u = 0; u < kLsePerThread; ++u) {
      const int i = threadIdx.x + u * C::kThreads;
      if (i < p.splits * p.heads) weight[i / p.heads][i % p.heads] = lse[u];
    }
    __syncthreads();
    if (threadIdx.x < p.heads) {
      const int h = threadIdx.x;
      float max = -INFINITY;
      for (int split = 0; split < p.splits; ++split) max = fmaxf(max, weight[split][h]);
      float total = 0.0f;
      for (int split = 0; split < p.splits; ++split) {
        const float split_lse = weight[split][h];
        const float w = split_lse == -INFINITY ? 0.0f : expf(split_lse - max);  // an empty split weighs 0
        weight[split][h] = w;
        total += w;
      }
      factor[h] = max == -INFINITY ? 0.0f : gate_of(p, gate_x) / total;
    }
    __syncthreads();
  }
  if (!has_granule) return;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (active && factor[head] != 0.0f) {
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s >= p.splits) break;
      const float w = weight[s][head];
      acc.x += w * part[s].x, acc.y += w * part[s].y, acc.z += w * part[s].z, acc.w += w * part[s].w;
    }
    const float f = factor[head];
    acc = make_float4(acc.x * f, acc.y * f, acc.z * f, acc.w * f);
  }
  store_out4(p.out + row * p.out_row_stride + head * p.out_head_stride + dim, acc);
}

}  // namespace sparse_decode::dsa
