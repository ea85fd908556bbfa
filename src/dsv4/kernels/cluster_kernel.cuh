// The cluster kernel of dsv4_decode (small batches): one thread-block cluster
// a token, one CTA a group of 64-column chunks; each group's statistics and
// P V sum go through distributed shared memory to the CTA that owns the
// dims, which folds them in group order. FP8 E4M3 or BF16 q and rows.
// docs/kernels/small_batch.md explains the design and its measurements.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/granules.h"
#include "common/instrument.cuh"
#include "common/ptx/cluster.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/fold.cuh"
#include "dsv4/steps/query.cuh"
#include "dsv4/steps/token_address.cuh"
#include "dsv4/steps/token_scope.cuh"
#include "dsv4/steps/walk.cuh"
#include "dsv4/traits.cuh"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4 {

// Sends this CTA's group statistics and P V sum (FP32) to the CTAs that own
// them. Granule g of the 128 4-dim granules goes to CTA g % n, slot
// [source rank][g / n][head]; the (max, sum) pairs go to every CTA.
template <class Traits>
__device__ __forceinline__ void send_group(ClusterSmem<Traits>& s, const OutputFragment<Traits>& acc, int rank,
                                           int ctas, float2 own_stats) {
  const uint32_t barrier = ptx::smem_address(&s.received_barrier);
  // (max, sum) of head h to CTA c: thread c * 16 + h (first: the owners start with them).
  if (threadIdx.x < ctas * Traits::kHeads) {
    const int peer = threadIdx.x / Traits::kHeads, h = threadIdx.x % Traits::kHeads;
    const uint32_t stats_slot = ptx::smem_address(&s.received_stats[rank][h]);
    ptx::st_async_peer(ptx::map_to_peer(stats_slot, peer), own_stats, ptx::map_to_peer(barrier, peer));
  }
  const int per_owner = Traits::granules_per_owner(ctas);
  const uint32_t received = ptx::smem_address(&s.received[0]);
  // granule / ctas as a multiply-high: exact for granule < 2^32 / ctas^2 (ctas >= 2).
  const uint32_t reciprocal = 0xffffffffu / static_cast<uint32_t>(ctas) + 1;
  emit_group_values<Traits>(acc, [&](int granule, int head, float4 values) {
    const int local = static_cast<int>(__umulhi(static_cast<uint32_t>(granule), reciprocal));
    const int owner = granule - local * ctas;
    const int slot = (rank * per_owner + local) * Traits::kHeads + head;
    ptx::st_async_peer(ptx::map_to_peer(received + slot * sizeof(float4), owner), values,
                       ptx::map_to_peer(barrier, owner));
  });
}

// Folds the received group P V sums of this CTA's granules in group (rank)
// order, scales and stores BF16 (fold_groups).
template <class Traits, int kPeers>
__device__ __forceinline__ void fold_owned(const ClusterSmem<Traits>& s, uint16_t* out_head, float* lse_head,
                                           const float* lse_sink, float bmm2, int rank, int ctas, int heads) {
  const int head = threadIdx.x % Traits::kHeads;
  const int per_owner = Traits::granules_per_owner(ctas);
  fold_groups<Traits, kPeers>(
      ctas, rank, ctas, heads, s.chunk.sink_log2[head], bmm2, out_head, lse_head, lse_sink,
      [&](int c) { return s.received_stats[c][head]; },
      [&](int c, int local) { return s.received[(c * per_owner + local) * Traits::kHeads + head]; });
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, resident_ctas(sizeof(ClusterSmem<Traits>)))
    cluster_kernel(const __grid_constant__ Dsv4Params p) {
  using Smem = ClusterSmem<Traits>;
  constexpr int kHeads = Traits::kHeads;
  static_assert(kHeads == 16,
                "the cluster kernel serves 16-head groups only (send_group: ctas x kHeads <= 256 threads)");
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int ctas = static_cast<int>(ptx::cluster_nctarank());
  const int64_t cluster = blockIdx.x / ctas;
  const int64_t token = cluster / p.head_groups;
  const HeadGroup heads = head_group<kHeads>(p, static_cast<int>(cluster % p.head_groups));
  const int tid = threadIdx.x;

  if (instrument::skips(p, instrument::kSkipAll)) return;
  instrument::phase_span(0);
  // The receive barrier expects its bytes before the cluster barrier's arrive;
  // the matching wait comes only before the first send, long after every CTA
  // arrived. The arrive is relaxed: mbarrier_init's own fence publishes the
  // initialization (a release arrive costs a GPU-scope fence here).
  if (tid == 0) {
    const uint32_t barrier = ptx::smem_address(&s.received_barrier);
    ptx::mbarrier_init(barrier, 1);
    ptx::mbarrier_arrive_expect_tx(barrier, received_bytes(Traits::kGranules, kHeads, rank, ctas));
  }
  ptx::cluster_arrive_relaxed();
  // Sinks are weights, not outputs of the previous kernel: their load is
  // issued before the dependency wait and lands while the gather is in flight.
  const float sink = p.sinks && tid < heads.count ? p.sinks[heads.first + tid] : -INFINITY;
  ptx::grid_dependency_wait();

  load_query<Traits>(s.chunk, p, token, heads);
  const int first = rank * p.chunks_per_group;
  const int count = min(p.chunks_per_group, p.chunks - first);
  const bool has_swa_columns = first * Traits::kChunkColumns < kSwaColumns;
  const TokenScope scope =
      token_scope<Traits>(s.chunk, p, token, heads, has_swa_columns, sink, first * Traits::kChunkColumns);
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
  // Output addresses of the fold, computed now: the parameters they read
  // would otherwise be fetched (and miss in the constant cache) at the end.
  uint16_t* out_head = p.out + token_offset<Traits>(p, token, p.out_token_stride, p.out_request_stride) +
                       (heads.first + tid % kHeads) * p.out_head_stride;
  float* lse_head = p.lse && rank == 0 && tid < heads.count
                        ? p.lse + token_offset<Traits>(p, token, p.lse_token_stride, p.lse_request_stride) +
                              heads.first + tid
                        : nullptr;
  asm volatile("" : "+l"(out_head), "+l"(lse_head));
  const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + heads.first + tid % kHeads : nullptr;  // stored_lse

  OutputFragment<Traits> acc = {};
  instrument::phase_span(1);
  walk_chunks<Traits>(s.chunk, p, scope, first, count, count,
                      accumulate_groups<Traits>(s.chunk, acc, [](OutputFragment<Traits>&, int) {}));
  instrument::phase_span(2);
  if (instrument::skips(p, instrument::kSkipMath)) return;

  const float2 own_stats = make_float2(s.chunk.running_max[0][tid % kHeads], s.chunk.running_sum[0][tid % kHeads]);
  ptx::cluster_wait();  // every CTA's receive barrier is initialized
  if (instrument::skips(p, instrument::kSkipExchange)) {
    if (tid < kHeads) s.received_stats[0][tid] = own_stats;
    __syncthreads();
    fold_owned<Traits, 1>(s, out_head, lse_head, lse_sink, bmm2, 0, 1, heads.count);
    return;
  }
  instrument::phase_span(3);
  send_group<Traits>(s, acc, rank, ctas, own_stats);
  instrument::phase_span(4);
  ptx::mbarrier_wait_parity_cluster(ptx::smem_address(&s.received_barrier), 0);
  instrument::phase_span(5);
  if (instrument::skips(p, instrument::kSkipFold)) return;
  with_group_bound<Traits::kMaxGroups>(ctas, [&](auto bound) {
    fold_owned<Traits, decltype(bound)::value>(s, out_head, lse_head, lse_sink, bmm2, rank, ctas,
                                               heads.count);
  });
  instrument::phase_span(6);
}

}  // namespace sparse_decode::dsv4
