// The chunk walk of the packed stream kernel's 64-head form, one loop a
// math warpgroup (each holds only its own accumulators): the shared
// start of a chunk (the rows' wait, the dequantization, the key tile's
// barrier), warpgroup 0's scores, softmax and P V of dims 0..255,
// warpgroup 1's P V of the rest, and each one's output, or on the split
// path (kSplitH64) each one's part of the CTA's share in the workspace.
#pragma once

#include <cstdint>

#include "common/instrument.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/stream_h64/dequant.cuh"
#include "dsv4_packed/steps/stream_h64/output.cuh"
#include "dsv4_packed/steps/stream_h64/pv.cuh"
#include "dsv4_packed/steps/stream_h64/score.cuh"
#include "dsv4_packed/steps/stream_h64/shares.cuh"
#include "dsv4_packed/steps/stream_h64/softmax.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// Chunk i's key tile, by both warpgroups: once its rows have landed,
// dequantized, the raw tile released to the producers' next bulk copy into
// it, and the key tile published to wgmma (async proxy).
__device__ __forceinline__ void start_chunk(Smem& s, int i, int chunks) {
  const int buffer = i % Traits::kBuffers;
  instrument::phase_mark(i, 0);
  ptx::mbarrier_wait_parity(ptx::smem_address(&s.rows_landed[buffer]), (i / Traits::kBuffers) & 1);
  if (i == 0) instrument::phase_span(3);
  instrument::phase_mark(i, 1);
  dequantize_chunk(s, buffer);
  ptx::fence_proxy_async_shared();
  if (i + Traits::kBuffers < chunks) {
    ptx::fence_proxy_async_release();
    ptx::named_barrier_arrive(Traits::kTileFreeBarrier + buffer, Traits::kLaunchThreads);
  }
  walk_sync();
  instrument::phase_mark(i, 2);
}

// The end of chunk i: the warpgroup's wgmmas done, then both warpgroups'
// (with the key tile and P) before the next dequantization overwrites them.
__device__ __forceinline__ void end_chunk(int i) {
  instrument::phase_mark(i, 6);
  ptx::wgmma_wait<0>();
  instrument::phase_mark(i, 7);
  walk_sync();
}

template <bool kGeneral>
__device__ __forceinline__ void walk_scorer(Smem& s, const Params& p, int64_t token, int first_head, int count,
                                            int chunks) {
  RowState rows[2];
  HalfDims o = {};
  for (int i = 0; i < chunks; ++i) {
    start_chunk(s, i, chunks);
    ChunkScores scores;
    score_chunk(s, scores);
    instrument::phase_mark(i, 3);
    RowStep steps[2];
    softmax_chunk(s, scores, p.scale_log2, rows, steps);
    instrument::phase_mark(i, 4);
    ptx::named_barrier_arrive(Traits::kProbsReadyBarrier, Traits::kThreads);
    instrument::phase_mark(i, 5);
    accumulate_low(s, scores, steps, o);
    end_chunk(i);
  }
  instrument::phase_span(4);
  ptx::wgmma_fence_operand(o);
  if (threadIdx.x % 4 == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s.running_max[fragment_row(h)] = rows[h].max;
      s.running_sum[fragment_row(h)] = rows[h].sum;
    }
  }
  walk_sync();
  const int exponent[2] = {rows[0].exponent, rows[1].exponent};
  if (p.split_ctas > 0) {  // the CTA's share: share index blockIdx.x (read here, not held through the walk)
    const int64_t share = blockIdx.x;
    write_share_dims(p, share, o, 0);
    const float max[2] = {rows[0].max, rows[1].max}, sum[2] = {rows[0].sum, rows[1].sum};
    write_share_stats(p, share, exponent, max, sum);
    return;
  }
  store_dims<kGeneral>(s, p, token, first_head, count, o, 0, exponent, true);
}

template <bool kGeneral>
__device__ __forceinline__ void walk_high(Smem& s, const Params& p, int64_t token, int first_head, int count,
                                          int chunks) {
  int exponent[2] = {kNoExponent, kNoExponent};  // warpgroup 0's exponents of the heads, as handed over
  HalfDims o = {};
  for (int i = 0; i < chunks; ++i) {
    start_chunk(s, i, chunks);
    instrument::phase_mark(i, 3);  // no scores or softmax here: 3 and 4 mark the start of the wait for P
    instrument::phase_mark(i, 4);
    ptx::named_barrier_sync(Traits::kProbsReadyBarrier, Traits::kThreads);
    instrument::phase_mark(i, 5);
    accumulate_high(s, exponent, o);
    end_chunk(i);
  }
  ptx::wgmma_fence_operand(o);
  walk_sync();  // warpgroup 0's statistics
  if (p.split_ctas > 0) {
    write_share_dims(p, blockIdx.x, o, Traits::kHalfDims);
    return;
  }
  store_dims<kGeneral>(s, p, token, first_head, count, o, Traits::kHalfDims, exponent, false);
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
