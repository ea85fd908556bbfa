// The packed cluster kernel of dsv4_decode_packed: one thread-block cluster
// a (token, 16-head group) unit, one CTA a run of 64-column chunks (the SWA
// segment's chunks, then the extra segment's). Each warp gathers 8 rows with
// cp.async, dequantizes their FP8 scale tiles to BF16 in shared memory and
// scores them with BF16 mma.sync, without waiting for the other warps; P V
// and the softmax statistics need two CTA barriers a chunk. The CTAs'
// partial results are pushed to their owners through distributed shared
// memory. docs/kernels/packed.md explains it.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/granules.h"
#include "common/math.cuh"
#include "common/ptx/cluster.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/cluster/common.cuh"
#include "dsv4_packed/steps/cluster/exchange.cuh"
#include "dsv4_packed/steps/cluster/gather.cuh"
#include "dsv4_packed/steps/cluster/pv.cuh"
#include "dsv4_packed/steps/cluster/reduce.cuh"
#include "dsv4_packed/steps/cluster/softmax.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed {

// kGeneral: the general form (request views, lens strides, the seq_lens
// window, lse with the sink: params.h), else the plain form.
template <bool kGeneral>
__global__ void __launch_bounds__(ClusterTraits::kThreads, 2) cluster_kernel(const __grid_constant__ Params p) {
  using Traits = ClusterTraits;
  constexpr int kHeads = Traits::kHeads;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  ClusterSmem& s = *reinterpret_cast<ClusterSmem*>(smem_bytes);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int ctas = static_cast<int>(ptx::cluster_nctarank());
  const int64_t token = blockIdx.x / ctas;
  const int head0 = blockIdx.y * kHeads;
  const int tid = threadIdx.x;

  // Sinks are weights, not outputs of the previous kernel: loaded before the dependency wait.
  const float sink_log2 = p.sinks && head0 + tid % kHeads < p.num_heads ? p.sinks[head0 + tid % kHeads] * kLog2e
                                                                         : -INFINITY;
  if (tid == 0 && ctas > 1) {  // peers' partials land here after the cluster barrier that follows the walk
    const uint32_t landed = ptx::smem_address(&s.partials_landed);
    ptx::mbarrier_init(landed, 1);
    ptx::mbarrier_arrive_expect_tx(landed, received_bytes(Traits::kGranules, kHeads, rank, ctas));
  }
  ptx::grid_dependency_wait();

  // q: thread t copies four 16-byte pieces of head t / 16, in a cp.async group of their own.
  {
    const int h = tid / 16, piece0 = tid % 16;
    const bool live = head0 + h < p.num_heads;  // 8 heads: rows 8..15 are zeros
    const uint16_t* src = p.q + token_offset<kGeneral>(p, token, p.q_token_stride, p.q_request_stride) +
                          (live ? int64_t{head0 + h} * p.q_head_stride : 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int piece = piece0 + 16 * i;
      ptx::cp_async_16(ptx::smem_address(&s.q[h][piece * 8]), src + piece * 8, live ? 16u : 0u);
    }
    ptx::cp_async_commit();
  }
  const int total_chunks = p.swa.chunks + p.extra.chunks;
  int swa_len, extra_len, window = kSwaColumns;
  if constexpr (kGeneral) {
    swa_len = segment_len<true>(p, p.swa, p.swa_views, token, p.swa.width);
    extra_len = p.extra.chunks > 0 ? segment_len<true>(p, p.extra, p.extra_views, token, 0) : 0;
    window = swa_window(p, token);
  } else {
    swa_len = p.swa.lens ? p.swa.lens[token] : p.swa.width;
    extra_len = p.extra.chunks > 0 ? p.extra.lens[token] : 0;
  }
  const bool count_out_of_range = blockIdx.y == 0;  // once a column, not once a head group

  float acc[8][4] = {};
  cluster::SoftmaxState state;
  for (int step = 0; step < p.chunks_per_cta; ++step) {
    const int chunk = rank * p.chunks_per_cta + step;
    if (chunk >= total_chunks) break;
    if (step > 0) __syncthreads();  // the previous chunk's P V is done with the KV tile and the probabilities
    const bool swa = chunk < p.swa.chunks;
    const SegmentParams& seg = swa ? p.swa : p.extra;
    const int column0 = (swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns;
    int64_t token_row = 0;  // the general form's: the token's row of seg.indices
    if constexpr (kGeneral) token_row = indices_offset<true>(p, seg, swa ? p.swa_views : p.extra_views, token);
    const uint32_t mask = cluster::gather_rows<kGeneral>(s, seg, token, token_row, column0, swa ? swa_len : extra_len,
                                                         swa ? window : kSwaColumns, count_out_of_range,
                                                         p.out_of_range_count);
    ptx::cp_async_commit();
    if (step == 0) {
      ptx::launch_dependents();
      ptx::cp_async_wait_group<1>();  // q (issued before the indices were loaded)
      __syncthreads();
    }
    ptx::cp_async_wait_all();
    __syncwarp();  // the warp's rows, copied by all its lanes
    cluster::dequantize_rows(s);
    __syncwarp();
    const float2 factor = cluster::softmax_chunk(s, state, mask, p.scale_log2);
    cluster::accumulate_chunk(s, acc, factor);
  }
  ptx::cp_async_wait_all();  // q, when this CTA had no chunk

  // This CTA no longer reads its KV tile: its accesses are released at
  // cluster scope before peers' partials land there; the partials barrier
  // was fenced at its initialization.
  ptx::fence_release_shared_cta();
  ptx::cluster_arrive_relaxed();
  ptx::cluster_wait();  // nor does any other CTA: the partials may land in the KV tiles
  if (ctas > 1) {
    cluster::send_partials(s, acc, state, rank, ctas);
    ptx::mbarrier_wait_parity_cluster(ptx::smem_address(&s.partials_landed), 0);  // every partial has landed
  } else {
    cluster::keep_partials(s, acc, state);
    __syncthreads();
  }
  cluster::reduce_owned<kGeneral>(s, p, token, head0, rank, ctas, sink_log2);
}

}  // namespace sparse_decode::dsv4_packed
