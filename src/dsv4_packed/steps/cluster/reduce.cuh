// After the exchange: each CTA folds the cluster's partial outputs of the
// granules it owns and stores them.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/granules.h"
#include "common/math.cuh"
#include "common/ptx/convert.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/cluster/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::cluster {

// Sums the received partial outputs of this CTA's granules in rank order
// (the same order every run: bitwise reproducible), normalizes, stores BF16.
// The general form (kGeneral) writes out and lse through request views and
// lse with the sink where the call asks for it.
template <bool kGeneral>
__device__ __forceinline__ void reduce_owned(const ClusterSmem& s, const Params& p, int64_t token, int head0,
                                             int rank, int ctas, float sink_log2) {
  constexpr int kHeads = Traits::kHeads, kPeers = Traits::kMaxClusterCtas;
  const int h = threadIdx.x % kHeads;
  const int head = head0 + h;
  if (head >= p.num_heads) return;  // 8 heads: the padding rows
  float cluster_max = -INFINITY;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) cluster_max = c < ctas ? fmaxf(cluster_max, s.received_stats[c][h].x) : cluster_max;
  float weight[kPeers], sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) {
    const float2 stats = s.received_stats[c < ctas ? c : 0][h];
    weight[c] = c >= ctas || stats.x == -INFINITY ? 0.0f : ptx::exp2_approx(stats.x - cluster_max);
    sum += weight[c] * stats.y;
  }
  const bool none = cluster_max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  const float scale = none ? 0.0f : 1.0f / (sum + ptx::exp2_approx(sink_log2 - cluster_max));
  if (rank == 0 && threadIdx.x < kHeads && p.lse) {
    float lse = none ? -INFINITY : (cluster_max + __log2f(sum)) * kLn2;
    if constexpr (kGeneral) {
      if (p.lse_with_sink && p.sinks) lse = lse_with_sink(cluster_max, sum, sink_log2, p.sinks[head]);
    }
    p.lse[token_offset<kGeneral>(p, token, p.lse_token_stride, p.lse_request_stride) + head] = lse;
  }
  uint16_t* out = p.out + token_offset<kGeneral>(p, token, p.out_token_stride, p.out_request_stride) +
                  head * p.out_head_stride;
  const int per_owner = Traits::granules_per_owner(ctas);
  const int owned = owned_granules(Traits::kGranules, rank, ctas);
  for (int local = threadIdx.x / kHeads; local < owned; local += Traits::kThreads / kHeads) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kPeers; ++c) {
      if (c >= ctas || weight[c] == 0.0f) continue;  // no active column there (its O is 0)
      const float4 v = s.received[(c * per_owner + local) * kHeads + h];
      o.x += weight[c] * v.x, o.y += weight[c] * v.y, o.z += weight[c] * v.z, o.w += weight[c] * v.w;
    }
    *reinterpret_cast<uint2*>(out + (local * ctas + rank) * 4) =
        make_uint2(ptx::bf16x2_bits(o.x * scale, o.y * scale), ptx::bf16x2_bits(o.z * scale, o.w * scale));
  }
}

}  // namespace sparse_decode::dsv4_packed::cluster
