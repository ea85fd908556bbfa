// After the walk: each CTA of the cluster pushes its partial output and
// softmax statistics to their owners through distributed shared memory.
#pragma once

#include <cstdint>

#include "common/ptx/cluster.cuh"
#include "common/ptx/copy.cuh"
#include "dsv4_packed/steps/cluster/common.cuh"

namespace sparse_decode::dsv4_packed::cluster {

// Pushes this CTA's unnormalized partial O and statistics to their owners:
// granule g (4 dims) of every head belongs to CTA g % n, slot [rank][g / n]
// [head]; the (max, sum) pairs go to every CTA (warp w to CTAs w, w + 8).
// st.async: each store completes its bytes on the owner's partials_landed
// barrier, so no cluster barrier (and its release fence over the DSMEM
// stores) is needed after the sends. A cluster of one CTA stores its own
// partials with plain shared stores instead (keep_partials): st.async needs
// a cluster of at least two CTAs.
__device__ __forceinline__ void send_partials(ClusterSmem& s, const float (&acc)[8][4], const SoftmaxState& state,
                                              int rank, int ctas) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, head = lane / 4;
  const int per_owner = Traits::granules_per_owner(ctas);
  const uint32_t received = ptx::smem_address(&s.received[0]);
  const uint32_t landed = ptx::smem_address(&s.partials_landed);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int dim = warp * Traits::kDimsPerWarp + 8 * j + 2 * (lane % 4);
    const int granule = dim / 4, owner = granule % ctas;
    const uint32_t slot = received + (((rank * per_owner + granule / ctas) * Traits::kHeads + head) * 4 + dim % 4) * 4;
    const uint32_t peer = ptx::map_to_peer(slot, owner), peer_landed = ptx::map_to_peer(landed, owner);
    ptx::st_async_peer(peer, make_float2(acc[j][0], acc[j][1]), peer_landed);
    ptx::st_async_peer(peer + 8 * 16, make_float2(acc[j][2], acc[j][3]), peer_landed);  // head + 8: 8 float4 slots on
  }
  if (lane % 4 == 0) {
    const uint32_t stats = ptx::smem_address(&s.received_stats[rank][head]);
#pragma unroll
    for (int c = warp; c < Traits::kMaxClusterCtas; c += Traits::kWarps) {
      if (c >= ctas) break;
      const uint32_t peer = ptx::map_to_peer(stats, c), peer_landed = ptx::map_to_peer(landed, c);
      ptx::st_async_peer(peer, make_float2(state.max[0], state.sum[0]), peer_landed);
      ptx::st_async_peer(peer + 8 * 8, make_float2(state.max[1], state.sum[1]), peer_landed);  // head + 8
    }
  }
}

// The one-CTA cluster's partials, in the slots send_partials fills (rank 0,
// owner 0); a __syncthreads makes them visible to reduce_owned.
__device__ __forceinline__ void keep_partials(ClusterSmem& s, const float (&acc)[8][4], const SoftmaxState& state) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, head = lane / 4;
  float* received = reinterpret_cast<float*>(&s.received[0]);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int dim = warp * Traits::kDimsPerWarp + 8 * j + 2 * (lane % 4);
    float* slot = received + ((dim / 4) * Traits::kHeads + head) * 4 + dim % 4;
    *reinterpret_cast<float2*>(slot) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(slot + 8 * 4) = make_float2(acc[j][2], acc[j][3]);  // head + 8
  }
  if (lane % 4 == 0 && warp == 0) {
    s.received_stats[0][head] = make_float2(state.max[0], state.sum[0]);
    s.received_stats[0][head + 8] = make_float2(state.max[1], state.sum[1]);
  }
}

}  // namespace sparse_decode::dsv4_packed::cluster
