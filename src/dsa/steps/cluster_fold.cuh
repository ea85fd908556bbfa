// A split's end when a row's splits run as one cluster (the direct kernel's
// DsaKernel::kDirectCluster, the split kernel's fold with BF16 caches): each CTA keeps its split's normalized output
// and lse in its own shared memory; after a cluster barrier each folds a
// slice of the row's granules from every split in split order, with the
// combine kernel's arithmetic (so kDirect's bits), applies the gate and
// stores BF16. No workspace round trip, no second launch.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ptx/cluster.cuh"
#include "common/ptx/copy.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"
#include "dsa/steps/gate.cuh"
#include "dsa/steps/output.cuh"

namespace sparse_decode::dsa {

// This split's result in place of the first part of P V (a thread owns its
// granules there) and each head's lse, for the peers to read after a
// cluster barrier. kThreads: the CTA's.
template <int kThreads, class Smem>
__device__ __forceinline__ void keep_split_result(const DsaParams& p, Smem& s, float v_scale) {
  using T = TileTraits;
  if (threadIdx.x < p.heads) {
    const int head = threadIdx.x;
    const float sum = split_sum(s, head);
    s.head_factor[head] = mean_factor(sum, v_scale);
    s.split_lse[head] = split_lse(s, head, sum);
  }
  __syncthreads();
  for (int x = threadIdx.x; x < p.heads * T::kGranules; x += kThreads) {
    const int head = x / T::kGranules, dim = (x % T::kGranules) * 4;
    *reinterpret_cast<float4*>(&s.tiles.reduce[0][head][dim]) = split_mean(s, head, dim, s.head_factor[head]);
  }
}

// One granule of the row from every split: loaded at once, then folded as
// the combine kernel folds (combine_kernel.cuh), gated and stored.
template <class Smem>
__device__ __forceinline__ void fold_granule(const DsaParams& p, const Smem& s, int64_t row, int x) {
  using T = TileTraits;
  const int head = x / T::kGranules, dim = (x % T::kGranules) * 4;
  const uint32_t part_address = ptx::smem_address(&s.tiles.reduce[0][head][dim]);
  const uint32_t lse_address = ptx::smem_address(&s.split_lse[head]);
  float4 part[kDsaMaxClusterSplits];
  float lse[kDsaMaxClusterSplits];
#pragma unroll
  for (int split = 0; split < kDsaMaxClusterSplits; ++split) {
    if (split < p.splits) {
      part[split] = ptx::ld_peer_float4(ptx::map_to_peer(part_address, split));
      lse[split] = ptx::ld_peer_float(ptx::map_to_peer(lse_address, split));
    }
  }
  const float gate_x = gate_input(p, row, head);
  float max = -INFINITY;
#pragma unroll
  for (int split = 0; split < kDsaMaxClusterSplits; ++split) {
    if (split < p.splits) max = fmaxf(max, lse[split]);
  }
  float weight[kDsaMaxClusterSplits];
  float total = 0.0f;
#pragma unroll
  for (int split = 0; split < kDsaMaxClusterSplits; ++split) {
    if (split < p.splits) {
      weight[split] = lse[split] == -INFINITY ? 0.0f : expf(lse[split] - max);  // an empty split weighs 0
      total += weight[split];
    }
  }
  const float factor = max == -INFINITY ? 0.0f : gate_of(p, gate_x) / total;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (factor != 0.0f) {
#pragma unroll
    for (int split = 0; split < kDsaMaxClusterSplits; ++split) {
      if (split >= p.splits) break;
      const float w = weight[split];
      acc.x += w * part[split].x, acc.y += w * part[split].y, acc.z += w * part[split].z, acc.w += w * part[split].w;
    }
    acc = make_float4(acc.x * factor, acc.y * factor, acc.z * factor, acc.w * factor);
  }
  store_out4(p.out + row * p.out_row_stride + head * p.out_head_stride + dim, acc);
}

// CTA `rank` of the row's cluster folds granules rank * slice .. + slice - 1
// (slice = ceil(heads * 48 / splits): more than one a thread below 6 splits).
template <int kThreads, class Smem>
__device__ __forceinline__ void fold_cluster(const DsaParams& p, const Smem& s, int64_t row) {
  using T = TileTraits;
  const int granules = p.heads * T::kGranules;
  const int slice = (granules + p.splits - 1) / p.splits;
  const int first = static_cast<int>(ptx::cluster_ctarank()) * slice;
  const int end = min(first + slice, granules);
  for (int x = first + static_cast<int>(threadIdx.x); x < end; x += kThreads) fold_granule(p, s, row, x);
}

// A split's end in a cluster (after the reduce): its result kept, published
// by a release fence and a relaxed cluster arrive, the row's slices folded
// from every peer, and a release arrive so that this CTA's loads of its
// peers' results (some unused when a row has no key) are performed before
// any peer, past the wait, exits. kThreads: the CTA's.
template <int kThreads, class Smem>
__device__ __forceinline__ void end_in_cluster(const DsaParams& p, Smem& s, int64_t row, float v_scale) {
  keep_split_result<kThreads>(p, s, v_scale);
  ptx::fence_release_shared_cta();
  ptx::cluster_arrive_relaxed();
  ptx::cluster_wait();
  fold_cluster<kThreads>(p, s, row);
  ptx::cluster_arrive_release();
  ptx::cluster_wait();
}

}  // namespace sparse_decode::dsa
