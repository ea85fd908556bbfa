// The packed stream kernel of dsv4_decode_packed (large batches, and the
// split path): one CTA a (token, 16-head group) unit walks the token's
// chunks (SWA, then extra), or a cluster pair walks half of them each and
// combines through DSMEM, or (split path) several CTAs a unit each write
// their share of it to the workspace for combine_kernel.
// A producer warpgroup bulk-copies each row's 576 data bytes into a KV tile
// as they are and writes the row's scales (steps/stream/produce.cuh); the
// math warps read the E4M3 bytes with ldmatrix and convert them exactly to
// FP16 in registers: S = Q K^T with FP16 wgmma (q rewritten to FP16 once,
// times a power of two a head), each 64-dim scale tile on its own
// accumulator, scaled in FP32; P V with FP16 mma.sync, the scale tile's
// scales folded into P relative to a scale exponent per (head, scale tile)
// that the warp carries across chunks. docs/kernels/packed.md explains it.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/cluster.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/stream/output.cuh"
#include "dsv4_packed/steps/stream/pair_exchange.cuh"
#include "dsv4_packed/steps/stream/produce.cuh"
#include "dsv4_packed/steps/stream/pv.cuh"
#include "dsv4_packed/steps/stream/query.cuh"
#include "dsv4_packed/steps/stream/score.cuh"
#include "dsv4_packed/steps/stream/shares.cuh"
#include "dsv4_packed/steps/stream/softmax.cuh"

namespace sparse_decode::dsv4_packed {

// kUnitCtas CTAs a (token, 16-head group) unit: 1, or 2 (a cluster; CTA r
// walks the r-th half of the chunks, and the pair combines through DSMEM),
// or 0: the split path, p.split_ctas CTAs a unit (CTA r the r-th run of
// chunks), each writing its share to the workspace for combine_kernel.
// kGeneral: the general form (request views, lens strides, the seq_lens
// window, lse with the sink: params.h), else the plain form.
template <int kUnitCtas, bool kGeneral>
__global__ void __launch_bounds__(StreamTraits::kLaunchThreads, StreamTraits::kCtasPerSm)
    stream_kernel(const __grid_constant__ Params p) {
  using Traits = StreamTraits;
  static_assert(kUnitCtas == 0 || kUnitCtas == 1 || kUnitCtas == 2, "the split path, one CTA a unit, or a pair");
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  StreamSmem& s = *reinterpret_cast<StreamSmem*>(smem_bytes);
  const int head_groups = (p.num_heads + Traits::kHeads - 1) / Traits::kHeads;
  const int unit_ctas = kUnitCtas == 0 ? p.split_ctas : kUnitCtas;
  const int64_t unit_index = blockIdx.x / unit_ctas;
  const uint32_t rank = kUnitCtas == 1 ? 0u : blockIdx.x % unit_ctas;
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * Traits::kHeads;
  const int count = min(Traits::kHeads, p.num_heads - first_head);
  const int tid = threadIdx.x, warp = tid / 32;
  const int chunks = p.swa.chunks + p.extra.chunks;
  const int per_cta = (chunks + unit_ctas - 1) / unit_ctas;
  const int first_chunk = min(static_cast<int>(rank) * per_cta, chunks);
  const int walk = min(per_cta, chunks - first_chunk);

  // Span marks (diagnostics builds only): 0 entry, 1 math warps' start, 2 q
  // converted, 3 first rows landed, 4 walk end, 5 results stored.
  instrument::phase_span(0);
  // Sinks are weights: read before the grid dependency wait (PDL).
  const float sink = p.sinks && tid < count ? p.sinks[first_head + tid] : -INFINITY;
  if (tid == 0) {  // one thread: racecheck attributes a warp's divergent mbarrier inits to another lane
#pragma unroll
    for (int b = 0; b < Traits::kBuffers; ++b) {
      ptx::mbarrier_init(ptx::smem_address(&s.rows_landed[b]), Traits::kRowsLandedArrivals);
    }
    if constexpr (kUnitCtas == 2) {  // the peer's share lands here after the walks
      ptx::mbarrier_init(ptx::smem_address(&s.exchange_landed), 1);
      ptx::mbarrier_arrive_expect_tx(ptx::smem_address(&s.exchange_landed), kPairExchangeBytes);
    }
  }
  __syncthreads();
  ptx::grid_dependency_wait();
  if (warp >= Traits::kWarps) {
    ptx::setmaxnreg_dec<Traits::kProducerRegisters>();
    stream::produce_chunks<kUnitCtas == 0, kGeneral>(s, p, token, first_chunk, walk,
                                                     p.out_of_range_count && first_head == 0);
    if constexpr (kUnitCtas == 2) {  // the producers take part in the barrier after the walks
      ptx::fence_release_shared_cta();
      ptx::cluster_arrive_relaxed();
      ptx::cluster_wait();
    }
    return;
  }
  ptx::setmaxnreg_inc<Traits::kMathRegisters>();
  instrument::phase_span(1);
  const stream::QueryBlocks query = stream::load_query<kGeneral>(p, token, first_head, count);
  if (tid < Traits::kHeads) {
    s.sink_log2[tid] = sink * kLog2e;
    s.running_max[tid] = -INFINITY;  // a CTA without chunks (one chunk a unit)
    s.running_sum[tid] = 0.0f;
  }
  stream::convert_query(s, query, p.scale_log2);
  instrument::phase_span(2);

  stream::DimFragment acc = {};
  int exponent[2] = {stream::kNoExponent, stream::kNoExponent};
  for (int i = 0; i < walk; ++i) {
    const int buffer = i % Traits::kBuffers;
    ptx::mbarrier_wait_parity(ptx::smem_address(&s.rows_landed[buffer]), (i / Traits::kBuffers) & 1);
    if (i == 0) instrument::phase_span(3);
    stream::score_chunk(s, buffer);
    stream::math_sync();
    stream::softmax_chunk(s, buffer, i == 0);
    stream::math_sync();
    if (warp < Traits::kScaleTiles) {
      stream::accumulate_scaled_tile(s, buffer, acc, exponent);
    } else {
      stream::accumulate_tail(s, buffer, acc);
    }
    // The warp's reads of the KV tile are done: released to the producers'
    // next bulk copy into it (async proxy).
    if (i + Traits::kBuffers < walk) {
      ptx::fence_proxy_async_release();
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + buffer, Traits::kLaunchThreads);
    }
  }
  instrument::phase_span(4);
  stream::HeadStats stats[2];
  if constexpr (kUnitCtas == 0) {
    stream::write_share(s, p, unit_index * unit_ctas + rank, acc, exponent);
  } else if constexpr (kUnitCtas == 1) {
    const int g = tid % 32 / 4;
    stats[0] = stream::HeadStats{s.running_max[g], s.running_sum[g]};
    stats[1] = stream::HeadStats{s.running_max[g + 8], s.running_sum[g + 8]};
    stream::store_output<kGeneral>(s, p, token, first_head, count, acc, exponent, stats, 0, 2);
  } else {
    // Both walks are done: this thread's accesses of the KV tiles are
    // released at cluster scope (no GPU-scope fence), then the barrier frees
    // the tiles for the peer's exchange; the exchange barrier was fenced at
    // its initialization.
    ptx::fence_release_shared_cta();
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait();
    stream::send_to_peer(s, acc, exponent, rank);
    ptx::mbarrier_wait_parity_cluster(ptx::smem_address(&s.exchange_landed), 0);  // the peer's share has landed
    stream::fold_pair(s, acc, exponent, stats, rank);
    stream::store_output<kGeneral>(s, p, token, first_head, count, acc, exponent, stats, static_cast<int>(rank),
                         static_cast<int>(rank) + 1);
  }
  instrument::phase_span(5);
}

}  // namespace sparse_decode::dsv4_packed
