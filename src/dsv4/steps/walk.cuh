// The walks over a token's chunks: each chunk's gather, Q K^T, softmax and
// P V, in the same order and with the same float operations in every kernel,
// so that a token's output has the same bits whichever kernel ran
// (docs/kernels/large_batch.md). One walk per way of feeding the KV tiles:
// one KV tile, two KV tiles, a producer warpgroup, and P V warps.
#pragma once

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/barriers.cuh"
#include "dsv4/steps/gather.cuh"
#include "dsv4/steps/pv.cuh"
#include "dsv4/steps/score.cuh"
#include "dsv4/steps/softmax.cuh"
#include "dsv4/steps/token_scope.cuh"

namespace sparse_decode::dsv4 {

// The P V step of the walks that keep a group's P V fragment over its
// chunks: accumulate_chunk, then group_end(acc, slot) after the group's last
// chunk (its statistics are then in running_max[slot] / running_sum[slot]).
template <class Traits, class GroupEnd>
struct GroupAccumulator {
  ChunkSmem<Traits>& s;
  OutputFragment<Traits>& acc;
  GroupEnd group_end;
  __device__ __forceinline__ void operator()(int kv_tile, bool group_start, bool group_last, int slot) {
    accumulate_chunk<Traits>(s, kv_tile, acc, group_start, slot);
    if (group_last) group_end(acc, slot);
  }
};

template <class Traits, class GroupEnd>
__device__ __forceinline__ GroupAccumulator<Traits, GroupEnd> accumulate_groups(ChunkSmem<Traits>& s,
                                                                                OutputFragment<Traits>& acc,
                                                                                GroupEnd group_end) {
  return {s, acc, group_end};
}

// The math of chunk i of a walk (its rows in KV tile `kv_tile`): Q K^T,
// softmax, then pv(kv_tile, group_start, group_last, slot 0), the P V step
// (GroupAccumulator, or the 64-head stream kernel's fold by dim block).
// Groups are runs of `per_group` chunks from the walk's first.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void chunk_math(ChunkSmem<Traits>& s, const TokenScope& scope, int i, int count,
                                           int per_group, int kv_tile, ChunkPv& pv, const PendingRow& pending = {}) {
  score_chunk<Traits>(s, kv_tile, 0);  // one chunk slot
  instrument::phase_mark(i, 3);
  issue_pending_row(pending);  // the rest of the next chunk's rows (64 heads: kGatherIssueNow)
  math_sync<Traits>();
  instrument::phase_mark(i, 4);
  const bool group_start = i % per_group == 0;
  softmax_chunk<Traits>(s, kv_tile, scope.scale_log2, group_start, 0);
  instrument::phase_mark(i, 5);
  math_sync<Traits>();
  instrument::phase_mark(i, 6);
  pv(kv_tile, group_start, i % per_group == per_group - 1 || i == count - 1, 0);
  instrument::phase_mark(i, 7);
}

// Two KV tiles: the rows of chunk i + 1 (and the entries of chunk i + 2) are
// in flight during chunk i's math. They are issued after the wait and fence
// for chunk i's rows (the entries' cp.async: so that the wait never waits on
// them). The first gather releases dependent grids (PDL); the sinks reach
// shared memory after it, so that their load never delays it.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_two_tiles(ChunkSmem<Traits>& s, const Dsv4Params& p,
                                                      const TokenScope& scope, int first, int count, int per_group,
                                                      ChunkPv& pv) {
  constexpr int kColumns = Traits::kChunkColumns;
  gather_chunk<Traits>(s, p, first * kColumns, scope.first_entry, scope.len, scope.window, scope.count_out_of_range,
                       0);
  if (count > 1) stage_chunk_entries<Traits>(s, p, scope.token, (first + 1) * kColumns, 1);
  ptx::cp_async_commit();
  ptx::launch_dependents();
  if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = sink_log2(scope.sink);
  for (int i = 0; i < count; ++i) {
    const int kv_tile = i % Traits::kKvTiles;
    instrument::phase_mark(i, 0);
    wait_tile<Traits>(s, kv_tile, i / Traits::kKvTiles);
    ptx::cp_async_wait_group<0>();
    // Q (cp.async) is read by wgmma, and chunk i - 1's reads of the other tile
    // must precede the bulk copies into it: both cross the async proxy.
    ptx::fence_proxy_async_shared();
    // Chunk i's rows and chunk i + 1's entries are visible; chunk i - 1's P V is done with the other tile.
    __syncthreads();
    instrument::phase_mark(i, 1);
    PendingRow pending;
    if (i + 1 < count) {
      const int column0 = (first + i + 1) * kColumns;
      pending = gather_chunk<Traits>(s, p, column0, staged_entry<Traits>(s, p, column0, (i + 1) % Traits::kKvTiles),
                                     scope.len, scope.window, scope.count_out_of_range, kv_tile ^ 1,
                                     Traits::kGatherIssueNow);
      if (i + 2 < count) stage_chunk_entries<Traits>(s, p, scope.token, column0 + kColumns, i % Traits::kKvTiles);
      ptx::cp_async_commit();
    }
    instrument::phase_mark(i, 2);
    if (instrument::skips(p, instrument::kSkipMath)) {
      issue_pending_row(pending);
      continue;
    }
    chunk_math<Traits>(s, scope, i, count, per_group, kv_tile, pv, pending);
  }
}

// One KV tile: chunk i's rows are gathered once chunk i - 1's P V is done
// with the tile, their entries loaded from global memory then. Meant for
// walks of one chunk (the cluster kernels and the BF16 split kernel up to
// W = 1024); longer walks run the same float operations, only slower.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_one_tile(ChunkSmem<Traits>& s, const Dsv4Params& p,
                                                     const TokenScope& scope, int first, int count, int per_group,
                                                     ChunkPv& pv) {
  constexpr int kColumns = Traits::kChunkColumns;
  for (int i = 0; i < count; ++i) {
    const int column0 = (first + i) * kColumns;
    if (i > 0) {
      // Chunk i - 1's reads of the tile (generic proxy) before the bulk copies into it (async proxy).
      ptx::fence_proxy_async_shared();
      __syncthreads();
    }
    instrument::phase_mark(i, 0);
    const int32_t entry = i == 0 ? scope.first_entry : chunk_entry<Traits>(p, scope.token, column0);
    gather_chunk<Traits>(s, p, column0, entry, scope.len, scope.window, scope.count_out_of_range, 0);
    ptx::cp_async_commit();
    if (i == 0) {
      ptx::launch_dependents();
      if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = sink_log2(scope.sink);
    }
    wait_tile<Traits>(s, 0, i);
    ptx::cp_async_wait_group<0>();
    instrument::phase_mark(i, 1);
    ptx::fence_proxy_async_shared();  // Q (cp.async) is read by wgmma (async proxy)
    __syncthreads();
    instrument::phase_mark(i, 2);
    if (instrument::skips(p, instrument::kSkipMath)) continue;
    chunk_math<Traits>(s, scope, i, count, per_group, 0, pv);
  }
}

// The producer warpgroup's walk over chunks [first, first + count) of a
// token: chunk i goes into KV tile i % kKvTiles once the math warps have
// released the tile's previous chunk (on the tile's hardware barrier, where
// the producers sleep without retrying; docs/kernels/large_batch.md). Each
// chunk's entries are loaded two chunks ahead, so that their latency hides
// behind that wait; the first two chunks' (ProducerEntries) come from the
// caller, loaded before the token's scope: `count` depends on lens, and a
// load that waited for it would put a DRAM trip before the second chunk's
// copies.
template <class Traits>
__device__ __forceinline__ void produce_chunks(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                               int first, int count, ProducerEntries entries) {
  constexpr int kColumns = Traits::kChunkColumns;
  int32_t entry = entries.first, next = entries.second;
  for (int i = 0; i < count; ++i) {
    const int kv_tile = i % Traits::kKvTiles;
    const int32_t after_next = i + 2 < count ? producer_entry<Traits>(p, scope.token, first + i + 2) : -1;
    if (i >= Traits::kKvTiles) {
      ptx::named_barrier_sync(Traits::kTileFreeBarrier + kv_tile, Traits::kTileFreeThreads);
      // Generic-proxy accesses of the tile's last use before the bulk copies
      // (async proxy) into it: this lane's zero fills, and the math warps'
      // reads that the barrier ordered before this point. Keep it after the
      // barrier, unconditional.
      ptx::fence_proxy_async_shared();
    }
    produce_chunk<Traits>(s, p, (first + i) * kColumns, entry, scope.len, scope.window, scope.count_out_of_range,
                          kv_tile);
    if (i == 0) ptx::launch_dependents();
    entry = next;
    next = after_next;
  }
}

// The math warps' walk with a producer warpgroup (produce_chunks): chunk i's
// rows are in KV tile i % kKvTiles once rows_landed says so; after its P V the
// math warps release the tile for the producers' next copies (the tile's
// hardware barrier; only where a later chunk refills it, so that every
// arrival meets the producers' wait).
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_fed(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                                int count, int per_group, ChunkPv& pv) {
  if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = sink_log2(scope.sink);
  ptx::cp_async_commit();  // load_query's copies: wait_group waits for committed groups only
  ptx::cp_async_wait_group<0>();
  ptx::fence_proxy_async_shared();  // Q (cp.async) is read by wgmma (async proxy)
  math_sync<Traits>();
  instrument::phase_span(2);  // the query has landed
  for (int i = 0; i < count; ++i) {
    const int kv_tile = i % Traits::kKvTiles;
    instrument::phase_mark(i, 0);
    wait_tile<Traits>(s, kv_tile, i / Traits::kKvTiles);
    instrument::phase_mark(i, 1);
    instrument::phase_mark(i, 2);
    if (!instrument::skips(p, instrument::kSkipMath)) chunk_math<Traits>(s, scope, i, count, per_group, kv_tile, pv);
    // The warp's reads of the tile are done: release them to the producers'
    // next bulk copy into it (async proxy) before the handoff.
    if (i + Traits::kKvTiles < count) {
      ptx::fence_proxy_async_release();
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + kv_tile, Traits::kTileFreeThreads);
    }
  }
}

// With P V warps, the scoring warps' walk (threads < kThreads): Q K^T and
// the softmax of chunk i into chunk slot i % 2, handed over to the P V
// warps (walk_chunks_after_scores) on the slot's two barriers. Chunk i's
// softmax waits for chunk i - 2's P V to leave the slot (its probabilities,
// rescale factors and statistics).
template <class Traits>
__device__ __forceinline__ void score_chunks(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                             int count, int per_group) {
  static_assert(Traits::kPvWarps > 0, "the scoring side of a walk with P V warps");
  constexpr int kSlots = Traits::kChunkSlots, kHandoff = Traits::kSlotHandoffThreads;
  if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = sink_log2(scope.sink);
  ptx::cp_async_commit();  // load_query's copies
  ptx::cp_async_wait_group<0>();
  ptx::fence_proxy_async_shared();  // Q (cp.async) is read by wgmma (async proxy)
  math_sync<Traits>();
  instrument::phase_span(2);  // the query has landed
  const auto mark = [&](int i, int k) {
    if (threadIdx.x == 0) instrument::phase_mark_in(0, i, k);
  };
  for (int i = 0; i < count; ++i) {
    const int kv_tile = i % Traits::kKvTiles, slot = i % kSlots;
    mark(i, 0);
    wait_tile<Traits>(s, kv_tile, i / Traits::kKvTiles);
    mark(i, 1), mark(i, 2);
    if (!instrument::skips(p, instrument::kSkipMath)) score_chunk<Traits>(s, kv_tile, slot);
    mark(i, 3);
    // Both halves of the scores are in the slot, and chunk i - 1's softmax
    // has written the statistics this one continues from.
    math_sync<Traits>();
    mark(i, 4);
    if (i >= kSlots) ptx::named_barrier_sync(Traits::kProbsFreeBarrier + slot, kHandoff);
    mark(i, 5);
    if (!instrument::skips(p, instrument::kSkipMath)) {
      softmax_chunk<Traits>(s, kv_tile, scope.scale_log2, i % per_group == 0, slot);
    }
    mark(i, 6);
    ptx::named_barrier_arrive(Traits::kProbsReadyBarrier + slot, kHandoff);
    mark(i, 7);
  }
}

// With P V warps, their walk: chunk i's P V step pv(kv_tile, group_start,
// group_last, slot) once the scoring warps have handed over its slot; then
// the slot goes back to them (if a later chunk uses it) and the tile to the
// producers (if a later chunk refills it). The P V warps are the tile's
// last readers: the scoring warps' reads of K came before the handover.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_after_scores(ChunkSmem<Traits>& s, const Dsv4Params& p, int count,
                                                         int per_group, ChunkPv& pv) {
  constexpr int kSlots = Traits::kChunkSlots, kHandoff = Traits::kSlotHandoffThreads;
  const auto mark = [&](int i, int k) {
    if (threadIdx.x == Traits::kThreads) instrument::phase_mark_in(1, i, k);
  };
  for (int i = 0; i < count; ++i) {
    const int kv_tile = i % Traits::kKvTiles, slot = i % kSlots;
    mark(i, 0);
    wait_tile<Traits>(s, kv_tile, i / Traits::kKvTiles);  // V: the rows' bytes, as the scoring warps saw them land
    mark(i, 1);
    ptx::named_barrier_sync(Traits::kProbsReadyBarrier + slot, kHandoff);
    for (int k = 2; k < 7; ++k) mark(i, k);
    if (!instrument::skips(p, instrument::kSkipMath)) {
      pv(kv_tile, i % per_group == 0, i % per_group == per_group - 1 || i == count - 1, slot);
    }
    mark(i, 7);
    if (i + kSlots < count) ptx::named_barrier_arrive(Traits::kProbsFreeBarrier + slot, kHandoff);
    if (i + Traits::kKvTiles < count) {  // released to the next bulk copy, as in the walk above
      ptx::fence_proxy_async_release();
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + kv_tile, Traits::kTileFreeThreads);
    }
  }
}

// Walks chunks [first, first + count) of a token with the traits' KV tiles;
// pv is the P V step (chunk_math). With producers the walk starts at chunk
// `first` of produce_chunks; with P V warps this is their side of the walk
// (score_chunks is the other).
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                            int first, int count, int per_group, ChunkPv&& pv) {
  if constexpr (Traits::kPvWarps > 0) {
    walk_chunks_after_scores<Traits>(s, p, count, per_group, pv);
  } else if constexpr (Traits::kProducerWarps > 0) {
    walk_chunks_fed<Traits>(s, p, scope, count, per_group, pv);
  } else if constexpr (Traits::kKvTiles == 2) {
    walk_chunks_two_tiles<Traits>(s, p, scope, first, count, per_group, pv);
  } else {
    walk_chunks_one_tile<Traits>(s, p, scope, first, count, per_group, pv);
  }
}

// Walks chunks [first, first + count) in groups of per_group chunks and
// calls group_end(fragment, slot) with each group's P V sum (its statistics
// are then in running_max[slot] / running_sum[slot]). Groups of one chunk
// (W <= 1024) start each chunk from a fresh fragment: no rescale step, the
// zeros go into the first MMAs; the float operations are those of
// accumulate_chunk.
template <class Traits, class GroupEnd>
__device__ __forceinline__ void walk_groups(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                            int first, int count, int per_group, GroupEnd&& group_end) {
  if (per_group == 1) {
    walk_chunks<Traits>(s, p, scope, first, count, 1, [&](int kv_tile, bool, bool, int slot) {
      OutputFragment<Traits> group = {};
      accumulate_dims<Traits, Traits::kOutputDimBlocks>(s, kv_tile, group, first_output_dim_block<Traits>(), slot);
      group_end(group, slot);
    });
  } else {
    OutputFragment<Traits> acc = {};
    walk_chunks<Traits>(s, p, scope, first, count, per_group, accumulate_groups<Traits>(s, acc, group_end));
  }
}

}  // namespace sparse_decode::dsv4
