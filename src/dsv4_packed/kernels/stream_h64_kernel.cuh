// The packed stream kernel's 64-head form (64 and 128 heads of
// dsv4_decode_packed): one CTA a (token, 64-head group) unit walks the
// token's chunks (SWA, then extra), each gathered row serving all 64 heads.
// The producer warpgroup is the 16-head kernel's (steps/stream/produce.cuh).
// Each math warpgroup serves 32 heads through a whole chunk: S = Q K^T with
// FP16 wgmma N = 32, the softmax 4 threads a head (it also finds each
// (scale tile, head)'s largest P V key), P V with FP16 mma.sync on two head
// tiles of two dim tiles a warp; the two meet only at the KV tiles.
// docs/kernels/packed.md explains it.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/output.cuh"
#include "dsv4_packed/steps/stream/produce.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/stream_h64/pv.cuh"
#include "dsv4_packed/steps/stream_h64/query.cuh"
#include "dsv4_packed/steps/stream_h64/score.cuh"
#include "dsv4_packed/steps/stream_h64/softmax.cuh"

namespace sparse_decode::dsv4_packed {

// kGeneral: the general form (request views, lens strides, the seq_lens
// window, lse with the sink: params.h), else the plain form.
template <bool kGeneral>
__global__ void __launch_bounds__(StreamH64Traits::kLaunchThreads, StreamH64Traits::kCtasPerSm)
    stream_h64_kernel(const __grid_constant__ Params p) {
  using Traits = StreamH64Traits;
  static_assert(Traits::kWarps == StreamTraits::kWarps && Traits::kProducerWarps == StreamTraits::kProducerWarps &&
                    Traits::kBuffers == StreamTraits::kBuffers && Traits::kTileRowBytes == StreamTraits::kTileRowBytes,
                "the 16-head kernel's producer step fills this plan's KV tiles");
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  StreamH64Smem& s = *reinterpret_cast<StreamH64Smem*>(smem_bytes);
  const int head_groups = (p.num_heads + Traits::kHeads - 1) / Traits::kHeads;
  const int64_t unit_index = blockIdx.x;
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * Traits::kHeads;
  const int count = min(Traits::kHeads, p.num_heads - first_head);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int chunks = p.swa.chunks + p.extra.chunks;

  // Span marks (diagnostics builds only): 0 entry, 1 math warps' start, 2 q
  // converted, 3 first rows landed, 4 walk end, 5 results stored; chunk
  // marks as the 16-head walks' (phase_clocks.cpp).
  instrument::phase_span(0);
  // Sinks are weights: read before the grid dependency wait (PDL).
  const float sink = p.sinks && tid < count ? p.sinks[first_head + tid] : -INFINITY;
  if (tid == 0) {  // one thread: racecheck attributes a warp's divergent mbarrier inits to another lane
#pragma unroll
    for (int b = 0; b < Traits::kBuffers; ++b) {
      ptx::mbarrier_init(ptx::smem_address(&s.rows_landed[b]), StreamTraits::kRowsLandedArrivals);
    }
  }
  __syncthreads();
  ptx::grid_dependency_wait();
  if (warp >= Traits::kWarps) {
    ptx::setmaxnreg_dec<Traits::kProducerRegisters>();
    stream::produce_chunks<false, kGeneral>(s, p, token, 0, chunks, p.out_of_range_count && first_head == 0);
    return;
  }
  ptx::setmaxnreg_inc<Traits::kMathRegisters>();
  instrument::phase_span(1);
  const stream_h64::QueryGroups query = stream_h64::load_query<kGeneral>(p, token, first_head, count);
  if (tid < Traits::kHeads) {
    s.sink_log2[tid] = sink * kLog2e;
    s.running_max[tid] = -INFINITY;
    s.running_sum[tid] = 0.0f;
  }
  stream_h64::convert_query(s, query, p.scale_log2);
  instrument::phase_span(2);

  // Warpgroup g owns heads 32g .. 32g + 31. P V: warp w of it the dim tiles
  // d = (w + g) % 4 and d + 4, so that the BF16 tile (7, twice the MMAs)
  // falls on another scheduler (w) in each warpgroup.
  const int warpgroup = warp / 4;
  const int group_head = Traits::kWarpgroupHeads * warpgroup;
  const int dim_tile = (warp + warpgroup) % 4;
  stream_h64::HeadTileFragments acc[Traits::kWarpDimTiles] = {};
  stream_h64::HeadTileExponents exponent[Traits::kWarpDimTiles];
#pragma unroll
  for (int d = 0; d < Traits::kWarpDimTiles; ++d)
#pragma unroll
    for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
      exponent[d][ht][0] = exponent[d][ht][1] = stream::kNoExponent;
    }
  for (int i = 0; i < chunks; ++i) {
    const int buffer = i % Traits::kBuffers;
    instrument::phase_mark(i, 0);
    ptx::mbarrier_wait_parity(ptx::smem_address(&s.rows_landed[buffer]), (i / Traits::kBuffers) & 1);
    if (i == 0) instrument::phase_span(3);
    instrument::phase_mark(i, 1);
    instrument::phase_mark(i, 2);  // no gather step: the producers copy the rows
    stream_h64::score_chunk(s, buffer, warpgroup);
    instrument::phase_mark(i, 3);
    stream_h64::warpgroup_sync(warpgroup);
    instrument::phase_mark(i, 4);
    stream_h64::softmax_chunk(s, buffer, i == 0);
    instrument::phase_mark(i, 5);
    stream_h64::warpgroup_sync(warpgroup);
    instrument::phase_mark(i, 6);
    stream_h64::accumulate_scaled_tile(s, buffer, dim_tile, group_head, acc[0], exponent[0]);
    if (dim_tile + 4 < Traits::kScaleTiles) {
      stream_h64::accumulate_scaled_tile(s, buffer, dim_tile + 4, group_head, acc[1], exponent[1]);
    } else {
      stream_h64::accumulate_tail(s, buffer, group_head, acc[1]);
    }
    instrument::phase_mark(i, 7);
    // The warp's reads of the KV tile are done: released to the producers'
    // next bulk copy into it (async proxy).
    if (i + Traits::kBuffers < chunks) {
      ptx::fence_proxy_async_release();
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + buffer, Traits::kLaunchThreads);
    }
  }
  instrument::phase_span(4);
  // Each (dim tile, head tile) stored as the 16-head kernel stores its 16
  // heads' dims of a warp; the BF16 tile's exponents stay kNoExponent.
  const int g = lane / 4;
#pragma unroll
  for (int d = 0; d < Traits::kWarpDimTiles; ++d)
#pragma unroll
    for (int ht = 0; ht < Traits::kWarpgroupHeadTiles; ++ht) {
      const int tile_head = group_head + 16 * ht, top = tile_head + g;
      const stream::HeadStats stats[2] = {stream::HeadStats{s.running_max[top], s.running_sum[top]},
                                          stream::HeadStats{s.running_max[top + 8], s.running_sum[top + 8]}};
      stream::store_warp_output<kGeneral>(p, token, first_head + tile_head, count - tile_head, dim_tile + 4 * d,
                                          acc[d][ht], exponent[d][ht], stats, 0, 2,
                                          [&](int head) { return s.sink_log2[tile_head + head]; });
    }
  instrument::phase_span(5);
}

}  // namespace sparse_decode::dsv4_packed
