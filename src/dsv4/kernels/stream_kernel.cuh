// The stream kernel of dsv4_decode (large batches): one CTA a unit (or two,
// each outputting half of the dims) walks the token's chunks up to the end
// of the column group of its last active one (lens), the next chunk's
// gather in flight during this one's math, and folds each group's P V sum
// into registers in group order: the same groups and the same fold as the
// cluster kernel and the split path, so the bits agree.
// docs/kernels/large_batch.md explains the design and its measurements;
// docs/kernels/heads64.md the 64-head form.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/instrument.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/barriers.cuh"
#include "dsv4/steps/fold.cuh"
#include "dsv4/steps/gather.cuh"
#include "dsv4/steps/pv.cuh"
#include "dsv4/steps/query.cuh"
#include "dsv4/steps/token_address.cuh"
#include "dsv4/steps/token_scope.cuh"
#include "dsv4/steps/walk.cuh"
#include "dsv4/traits.cuh"

namespace sparse_decode::dsv4 {

// Folds the group that just ended (its statistics in running_max[slot] /
// running_sum[slot]) into a head's fold state, in group order.
template <class Traits>
__device__ __forceinline__ FoldWeights fold_head(const ChunkSmem<Traits>& s, FoldState& state, int head, int slot) {
  return fold_group(state, s.running_max[slot][head], s.running_sum[slot][head]);
}

// out (dim blocks from first_block) <- fold of the group's P V sum: the
// values the split path and the cluster kernel send, folded as they fold
// them. fold(t, b): the FoldWeights of head 16t + lane / 4 + 8b.
template <class Traits, int kBlocks, class Fold>
__device__ __forceinline__ void fold_dim_blocks(OutputFragment<Traits>& out, int first_block,
                                                const DimBlockFragment<Traits, kBlocks>& group, Fold&& fold) {
#pragma unroll
  for (int t = 0; t < Traits::kHeadTiles; ++t)
#pragma unroll
    for (int b = 0; b < 2; ++b) {  // fragment values [0], [1]: top head; [2], [3]: bottom head
      const FoldWeights w = fold(t, b);
#pragma unroll
      for (int block = 0; block < kBlocks; ++block)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int par = 0; par < 2; ++par) {
            const float(&x)[4] = group[t][block][half][par];
            float(&o)[4] = out[t][first_block + block][half][par];
            o[2 * b] = fold_value(o[2 * b], w, x[2 * b]);
            o[2 * b + 1] = fold_value(o[2 * b + 1], w, x[2 * b + 1]);
          }
    }
}

// Walks the token's first `walked` chunks and folds every group into out;
// state[t][b] is then the fold state of head 16t + lane / 4 + 8b.
// At 16 heads the group's P V fragment accumulates over its chunks and is
// folded at its end, the fold state in registers. At 64 heads (groups of one
// chunk: the launcher's rule) the group's statistics are final before its
// P V, so each dim block of its P V is folded as soon as it is computed
// (64 of its 128 floats live next to out), the fold state and weights in
// shared memory (thread h folds head h).
template <class Traits>
__device__ __forceinline__ void walk_and_fold(StreamSmem<Traits>& smem, const Dsv4Params& p, const TokenScope& scope,
                                              int walked, FoldState (&state)[Traits::kHeadTiles][2],
                                              OutputFragment<Traits>& out) {
  ChunkSmem<Traits>& s = smem.chunk;
  const int lane = threadIdx.x % 32;
  if constexpr (Traits::kStreamFoldsByDimBlock) {
    auto& folds = smem.folds;
    const int tid = threadIdx.x;
    const int first_dim_block = first_output_dim_block<Traits>();
    if (tid < Traits::kHeads) folds.max[tid] = -INFINITY, folds.sum[tid] = 0.0f;  // seen after the walk's barriers
    walk_chunks<Traits>(s, p, scope, 0, walked, 1, [&](int kv_tile, bool, bool, int slot) {
      if (tid < Traits::kHeads) {
        FoldState head_state{folds.max[tid], folds.sum[tid]};
        const FoldWeights w = fold_head<Traits>(s, head_state, tid, slot);
        folds.max[tid] = head_state.max, folds.sum[tid] = head_state.sum;
        folds.keep[tid] = w.keep, folds.take[tid] = w.take;
      }
      math_sync<Traits>();
      // The __syncwarp ends a dim block: without it ptxas overlaps the two
      // dim blocks' MMAs and folds and spills ~100 values (with it, none). A
      // rolled loop would rotate all of out (128 moves) each dim block.
#pragma unroll
      for (int block = 0; block < Traits::kOutputDimBlocks; ++block) {
        DimBlockFragment<Traits, 1> group = {};  // a group starts from +0
        accumulate_dims<Traits, 1>(s, kv_tile, group, first_dim_block + block, slot);
        fold_dim_blocks<Traits, 1>(out, block, group, [&](int t, int b) {
          const int head = 16 * t + lane / 4 + 8 * b;
          return FoldWeights{folds.keep[head], folds.take[head]};
        });
        __syncwarp();
      }
    });
    math_sync<Traits>();
#pragma unroll
    for (int t = 0; t < Traits::kHeadTiles; ++t)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int head = 16 * t + lane / 4 + 8 * b;
        state[t][b] = FoldState{folds.max[head], folds.sum[head]};
      }
  } else {
    walk_groups<Traits>(s, p, scope, 0, walked, p.chunks_per_group, [&](OutputFragment<Traits>& group, int slot) {
      FoldWeights folds[Traits::kHeadTiles][2];
#pragma unroll
      for (int t = 0; t < Traits::kHeadTiles; ++t)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          folds[t][b] = fold_head<Traits>(s, state[t][b], 16 * t + lane / 4 + 8 * b, slot);
        }
      fold_dim_blocks<Traits, Traits::kOutputDimBlocks>(out, 0, group, [&](int t, int b) { return folds[t][b]; });
    });
  }
}

// The fold of a wholly masked group (keep 1, take 0, a +0 sum) turns a -0
// output into +0 and changes no other bit, however many such groups follow:
// applied once after a walk that stops before the token's last group
// (walked_chunks), it gives the bits of the walk over every chunk (the
// split and cluster kernels' walks).
template <class Traits>
__device__ __forceinline__ void fold_unwalked_chunks(OutputFragment<Traits>& out) {
  float* values = &out[0][0][0][0][0];
#pragma unroll
  for (int i = 0; i < int{sizeof(OutputFragment<Traits>) / sizeof(float)}; ++i) {
    values[i] = fold_value(values[i], FoldWeights{1.0f, 0.0f}, 0.0f);
  }
}

// The first thread of the warps that walk P V and store (span marks 1, 3, 4).
template <class Traits>
inline constexpr unsigned kPvFirstThread = Traits::kPvWarps > 0 ? Traits::kThreads : 0;

template <class Traits>
__global__ void __launch_bounds__(Traits::kLaunchThreads, resident_ctas(sizeof(StreamSmem<Traits>)))
    stream_kernel(const __grid_constant__ Dsv4Params p) {
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  StreamSmem<Traits>& smem = *reinterpret_cast<StreamSmem<Traits>*>(smem_bytes);
  ChunkSmem<Traits>& s = smem.chunk;
  const unsigned unit = blockIdx.x / Traits::kDimParts;  // token * head_groups + head group
  const int64_t token = unit / p.head_groups;
  const HeadGroup heads = head_group<Traits::kHeads>(p, static_cast<int>(unit % p.head_groups));
  const int first_dim_block = first_output_dim_block<Traits>();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (instrument::skips(p, instrument::kSkipAll)) return;
  instrument::phase_span(0);

  const float sink = p.sinks && tid < heads.count ? p.sinks[heads.first + tid] : -INFINITY;
  ptx::grid_dependency_wait();
  // The producers' entries of the first two chunks, loaded before the
  // token's scope (lens, seq_lens): the DRAM trips overlap instead of
  // following each other.
  ProducerEntries first_entries;
  if constexpr (Traits::kProducerWarps > 0) {
    if (warp >= Traits::kFirstProducerWarp) first_entries = first_producer_entries<Traits>(p, token, 0);
  }
  load_query<Traits>(s, p, token, heads);
  const TokenScope scope = token_scope<Traits>(s, p, token, heads, true, sink, -1);
  const int walked = walked_chunks<Traits>(p, scope);  // every role walks as many
  if constexpr (Traits::kProducerWarps > 0) {
    // The producer warpgroup copies the rows with few registers; the math warps take the rest.
    using Registers = ProducerRegisters<Traits, resident_ctas(sizeof(StreamSmem<Traits>))>;
    if (warp >= Traits::kFirstProducerWarp) {
      ptx::setmaxnreg_dec<Registers::kProducer>();
      produce_chunks<Traits>(s, p, scope, 0, walked, first_entries);
      return;
    }
    ptx::setmaxnreg_inc<Registers::kMath>();
  }
  if constexpr (Traits::kPvWarps > 0) {
    // The scoring warps hand each chunk to the P V warps, which fold and store.
    if (tid < Traits::kThreads) {
      score_chunks<Traits>(s, p, scope, walked, p.chunks_per_group);
      return;
    }
  }
  const int store_warp = warp - (Traits::kPvWarps > 0 ? Traits::kWarps : 0);  // among the warps that run P V
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;

  // This thread's heads in head tile t: 16t + lane / 4 (fragment elements 0, 1) and 16t + lane / 4 + 8 (2, 3).
  FoldState state[Traits::kHeadTiles][2];
  OutputFragment<Traits> out = {};
  instrument::phase_span(1, kPvFirstThread<Traits>);
  walk_and_fold<Traits>(smem, p, scope, walked, state, out);
  if (walked < p.chunks) fold_unwalked_chunks<Traits>(out);
  instrument::phase_span(3, kPvFirstThread<Traits>);
  if (instrument::skips(p, instrument::kSkipMath)) return;

  uint16_t* out_token = p.out + token_offset<Traits>(p, token, p.out_token_stride, p.out_request_stride) +
                        heads.first * p.out_head_stride;
#pragma unroll
  for (int t = 0; t < Traits::kHeadTiles; ++t) {
    const int top_head = 16 * t + lane / 4, bottom_head = top_head + 8;
    const float top_scale = output_scale(state[t][0], s.sink_log2[top_head], bmm2);
    const float bottom_scale = output_scale(state[t][1], s.sink_log2[bottom_head], bmm2);
    const bool bottom_exists = bottom_head < heads.count;  // not with H = 8
    if (p.lse && first_dim_block == 0 && store_warp == 0 && lane % 4 == 0) {
      float* lse = p.lse + token_offset<Traits>(p, token, p.lse_token_stride, p.lse_request_stride) + heads.first;
      const float* lse_sinks = p.lse_with_sink && p.sinks ? p.sinks + heads.first : nullptr;  // stored_lse
      lse[top_head] = stored_lse<Traits>(state[t][0], s.sink_log2[top_head], lse_sinks ? lse_sinks + top_head : nullptr);
      if (bottom_exists) {
        lse[bottom_head] =
            stored_lse<Traits>(state[t][1], s.sink_log2[bottom_head], lse_sinks ? lse_sinks + bottom_head : nullptr);
      }
    }
#pragma unroll
    for (int block = 0; block < Traits::kOutputDimBlocks; ++block)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // Granule lane % 4 of this 16-dim half: its values are (n-tile 0, n-tile 1) x
        // [0], [1] of the top head, [2], [3] of the bottom one.
        const int first_dim = store_warp * Traits::kDimsPerWarp + (first_dim_block + block) * 32 + half * 16 +
                              granule_dim<Traits>(lane % 4, 0);
        const float(&ntile0)[4] = out[t][block][half][0];
        const float(&ntile1)[4] = out[t][block][half][1];
        store_granule<Traits>(out_token + top_head * p.out_head_stride, first_dim, ntile0[0] * top_scale,
                              ntile1[0] * top_scale, ntile0[1] * top_scale, ntile1[1] * top_scale);
        if (!bottom_exists) continue;
        store_granule<Traits>(out_token + bottom_head * p.out_head_stride, first_dim, ntile0[2] * bottom_scale,
                              ntile1[2] * bottom_scale, ntile0[3] * bottom_scale, ntile1[3] * bottom_scale);
      }
  }
  instrument::phase_span(4, kPvFirstThread<Traits>);
}

}  // namespace sparse_decode::dsv4
