// Two CTAs a unit (the pair): after both walks each CTA sends the peer the
// heads it stores and folds the peer's share into its own.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "common/ptx/cluster.cuh"
#include "common/ptx/copy.cuh"
#include "dsv4_packed/steps/stream/common.cuh"

namespace sparse_decode::dsv4_packed::stream {

// Two CTAs a unit, after both walks: CTA r stores heads lane / 4 + 8 r of
// every thread's dims. Each thread sends the other head's P V values, its
// scale exponent and (threads < 16) every head's statistics into the peer's
// exchange area by st.async, each store completing its bytes on the peer's
// exchange_landed barrier (send_to_peer); once its own barrier completes,
// each CTA folds the peer's share into its own, rank 0's share first
// (fold_pair), and returns the statistics of the head it stores in `stats`.
__device__ __forceinline__ void send_to_peer(Smem& s, const DimFragment& acc, const int (&exponent)[2],
                                             uint32_t rank) {
  const int tid = threadIdx.x, warp = tid / 32;
  const int send = 1 - static_cast<int>(rank);  // the head half the peer stores
  const uint32_t peer = rank ^ 1u;
  const uint32_t values = ptx::map_to_peer(ptx::smem_address(&s.exchange.values[tid][0]), peer);
  const uint32_t landed = ptx::map_to_peer(ptx::smem_address(&s.exchange_landed), peer);
#pragma unroll
  for (int db = 0; db < 2; ++db)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int slot = 8 * db + 4 * half + 2 * n;
        const float(&a)[4] = acc[db][half][n];  // select, not index: the fragment stays in registers
        ptx::st_async_peer(values + 4 * slot, make_float2(send == 0 ? a[0] : a[2], send == 0 ? a[1] : a[3]), landed);
      }
  const int my_exponent = warp >= Traits::kScaleTiles ? 0 : send == 0 ? exponent[0] : exponent[1];
  ptx::st_async_peer(ptx::map_to_peer(ptx::smem_address(&s.exchange.scale_exponent[tid]), peer),
                     static_cast<uint32_t>(my_exponent), landed);
  if (tid < Traits::kHeads) {
    ptx::st_async_peer(ptx::map_to_peer(ptx::smem_address(&s.exchange.stats[tid]), peer),
                       make_float2(s.running_max[tid], s.running_sum[tid]), landed);
  }
}

__device__ __forceinline__ void fold_pair(const Smem& s, DimFragment& acc, int (&exponent)[2], HeadStats (&stats)[2],
                                          uint32_t rank) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int keep = static_cast<int>(rank);
  const int head = lane / 4 + 8 * keep;
  const float own_max = s.running_max[head], own_sum = s.running_sum[head];
  const float2 peer_stats = s.exchange.stats[head];
  const float joint_max = fmaxf(own_max, peer_stats.x);
  const float own_weight = own_max == -INFINITY ? 0.0f : ptx::exp2_approx(own_max - joint_max);
  const float peer_weight = peer_stats.x == -INFINITY ? 0.0f : ptx::exp2_approx(peer_stats.x - joint_max);
  // Rank 0's share first, in both CTAs.
  const float first_sum = rank == 0 ? own_sum * own_weight : peer_stats.y * peer_weight;
  const float second_sum = rank == 0 ? peer_stats.y * peer_weight : own_sum * own_weight;
  (keep == 0 ? stats[0] : stats[1]) = HeadStats{joint_max, first_sum + second_sum};
  float own_factor = own_weight, peer_factor = peer_weight;  // the BF16 dims (warp 7) carry no scale exponent
  if (warp < Traits::kScaleTiles) {
    // The common scale exponent comes from the larger weighted share (scale
    // exponent plus the weight's exponent), so that the share that dominates
    // keeps its bits even when the other half's scale exponent is far above it.
    const int own_exponent = keep == 0 ? exponent[0] : exponent[1];
    const int peer_exponent = s.exchange.scale_exponent[tid];
    const int common =
        max(max(weighted_exponent(own_exponent, own_weight), weighted_exponent(peer_exponent, peer_weight)), -127);
    own_factor = own_weight > 0.0f ? own_weight * pow2(own_exponent - common) : 0.0f;
    peer_factor = peer_weight > 0.0f ? peer_weight * pow2(peer_exponent - common) : 0.0f;
    if (keep == 0) {
      exponent[0] = common;
    } else {
      exponent[1] = common;
    }
  }
  const float* received = s.exchange.values[tid];
#pragma unroll
  for (int db = 0; db < 2; ++db)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          float& value = keep == 0 ? acc[db][half][n][v] : acc[db][half][n][2 + v];
          const float own = value * own_factor;
          const float other = received[8 * db + 4 * half + 2 * n + v] * peer_factor;
          value = rank == 0 ? own + other : other + own;
        }
}

}  // namespace sparse_decode::dsv4_packed::stream
