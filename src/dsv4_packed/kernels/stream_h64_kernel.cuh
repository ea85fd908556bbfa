// The packed stream kernel's 64-head form (64 and 128 heads of
// dsv4_decode_packed): one CTA a (token, 64-head group) unit walks the
// token's chunks (SWA, then extra), the heads as the M of every wgmma. The
// producer warpgroup is the 16-head kernel's (steps/stream/produce.cuh).
// Each chunk: both math warpgroups dequantize the raw rows into the key
// tile (BF16); warpgroup 0 computes S = Q K^T from shared memory and the
// softmax in its registers, hands P to warpgroup 1 through shared memory,
// and both multiply P by the key tile read as V, 256 dims each, warpgroup
// 0 with P from registers. On the split path (kSplitH64, p.split_ctas > 0)
// a unit's chunks run in runs of p.chunks_per_cta over p.split_ctas CTAs,
// each writing its share to the workspace (steps/stream_h64/shares.cuh)
// for the combine kernel. docs/kernels/packed_h64.md explains it.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/produce.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/stream_h64/query.cuh"
#include "dsv4_packed/steps/stream_h64/walk.cuh"

namespace sparse_decode::dsv4_packed {

// kGeneral: the general form (request views, lens strides, the seq_lens
// window, lse with the sink: params.h), else the plain form.
template <bool kGeneral>
__global__ void __launch_bounds__(StreamH64Traits::kLaunchThreads, StreamH64Traits::kCtasPerSm)
    stream_h64_kernel(const __grid_constant__ Params p) {
  using Traits = StreamH64Traits;
  static_assert(Traits::kWarps == StreamTraits::kWarps && Traits::kProducerWarps == StreamTraits::kProducerWarps &&
                    Traits::kBuffers == StreamTraits::kBuffers && Traits::kTileRowBytes == StreamTraits::kTileRowBytes,
                "the 16-head kernel's producer step fills this plan's raw KV tiles");
  extern __shared__ __align__(128) uint8_t smem_bytes[];
  StreamH64Smem& s = *reinterpret_cast<StreamH64Smem*>(smem_bytes);
  const int head_groups = (p.num_heads + Traits::kHeads - 1) / Traits::kHeads;
  const bool split = p.split_ctas > 0;
  const int unit_ctas = split ? p.split_ctas : 1;
  const int64_t unit_index = blockIdx.x / unit_ctas;
  const int rank = static_cast<int>(blockIdx.x % unit_ctas);
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * Traits::kHeads;
  const int count = min(Traits::kHeads, p.num_heads - first_head);
  const int tid = threadIdx.x, warp = tid / 32;
  // This CTA's chunks (SWA, then extra): all of the token's, or its run on the split path.
  const int first_chunk = split ? rank * p.chunks_per_cta : 0;
  const int token_chunks = p.swa.chunks + p.extra.chunks;
  const int chunks = split ? min(p.chunks_per_cta, token_chunks - first_chunk) : token_chunks;

  // Span marks (diagnostics builds only): 0 entry, 1 math warps' start, 2 q
  // converted, 3 first rows landed, 4 walk end, 5 results stored; chunk
  // marks: 0 wait, 1 rows landed, 2 key tile ready, 3 scores, 4 softmax,
  // 5 P handed over, 6 P V issued, 7 P V done.
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
    const bool count_out_of_range = p.out_of_range_count && first_head == 0;
    // A split CTA walks a few chunks: its first chunk's indices load beside the lens (as the 16-head split path's).
    if (split) {
      stream::produce_chunks<true, kGeneral>(s, p, token, first_chunk, chunks, count_out_of_range);
    } else {
      stream::produce_chunks<false, kGeneral>(s, p, token, first_chunk, chunks, count_out_of_range);
    }
    return;
  }
  ptx::setmaxnreg_inc<Traits::kMathRegisters>();
  instrument::phase_span(1);
  const stream_h64::QueryGroups query = stream_h64::load_query<kGeneral>(p, token, first_head, count);
  if (tid < Traits::kHeads) s.sink_log2[tid] = sink * kLog2e;
  stream_h64::store_query(s, query);
  instrument::phase_span(2);

  if (tid < Traits::kWarpgroupThreads) {
    stream_h64::walk_scorer<kGeneral>(s, p, token, first_head, count, chunks);
  } else {
    stream_h64::walk_high<kGeneral>(s, p, token, first_head, count, chunks);
  }
  instrument::phase_span(5);
}

}  // namespace sparse_decode::dsv4_packed
