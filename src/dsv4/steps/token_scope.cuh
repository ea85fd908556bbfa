// What the chunk walk of one token needs besides its chunks: lens, the SWA
// window under seq_lens (with the varlen request search), the scale and the
// sink; in the page walk, lens and the window from the HCA metadata.
#pragma once

#include <cstdint>

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/gather.cuh"
#include "dsv4/steps/query.cuh"
#include "dsv4/steps/token_address.cuh"
#include "dsv4/walk_rules.h"
#include "dsv4_hca/expand_rules.h"
#include "sparse_decode/types.h"

namespace sparse_decode::dsv4 {

// The request whose query range holds the token under varlen
// cum_seq_lens_q (non-decreasing), -1 if none: the last of 256 evenly spaced
// pivots at or below the token, then the requests between it and the next
// pivot, all threads at once. Called by every thread of the CTA (barriers).
template <class Traits>
__device__ __forceinline__ int varlen_request(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token) {
  if (threadIdx.x == 0) s.request = 0;
  __syncthreads();
  const int stride = (p.num_requests + Traits::kThreads - 1) / Traits::kThreads;
  const int pivot = threadIdx.x * stride;
  if (pivot < p.num_requests && p.cum_seq_lens_q[pivot] <= token) atomicMax(&s.request, pivot);
  __syncthreads();
  const int first = s.request, last = min(first + stride, p.num_requests);
  __syncthreads();
  if (threadIdx.x == 0) s.request = -1;
  __syncthreads();
  for (int b = first + threadIdx.x; b < last; b += Traits::kThreads) {
    if (p.cum_seq_lens_q[b] <= token && token < p.cum_seq_lens_q[b + 1]) s.request = b;
  }
  __syncthreads();
  return s.request;
}

// SWA columns valid for the token under seq_lens: min(128, position + 1),
// position = seq_lens[b] - q_len_b + (index of the token in request b).
// Called by every thread of a CTA that holds SWA columns (varlen: a barrier).
template <class Traits>
__device__ __forceinline__ int swa_window(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token) {
  int64_t position;
  if (!p.cum_seq_lens_q) {
    const int64_t request = token / p.q_len;
    position = int64_t{p.seq_lens[request]} - p.q_len + (token - request * p.q_len);
  } else {
    const int b = varlen_request<Traits>(s, p, token);
    if (b < 0) return 0;
    const int64_t begin = p.cum_seq_lens_q[b], end = p.cum_seq_lens_q[b + 1];
    position = int64_t{p.seq_lens[b]} - (end - begin) + (token - begin);
  }
  return static_cast<int>(position < 0 ? 0 : position + 1 < kSwaColumns ? position + 1 : kSwaColumns);
}

// The page walk's active columns of the token, len = 128 + n_t with n_t =
// max(0, min(lens[t] - 128, hca_seq_lens[b] - 128, max_pages * page_size))
// (0 for a token of no request), as the expansion's lens, and its window
// clamp(swa_lens[t], 0, 128) (128 where the CTA holds no window column).
// Every load issues before any of them is used: arithmetic on the first
// one before the next issues would wait a DRAM trip there. Called by every
// thread of the CTA (varlen: barriers).
template <class Traits>
__device__ __forceinline__ void page_walk_scope(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                                bool has_swa_columns, int& len, int& window) {
  if (instrument::skips(p, instrument::kSkipScopeLoads)) {
    len = p.pages.columns;
    window = kSwaColumns;
    return;
  }
  const bool load_bounds = !instrument::skips(p, instrument::kSkipScopeBounds);  // always in a release build
  // Tokens are below 2^31 (the grid): a 32-bit division.
  // Both arms int64_t: an int/uint32_t conditional would turn varlen's -1 (no request) into 2^32 - 1.
  const int64_t request = p.cum_seq_lens_q
                              ? int64_t{varlen_request<Traits>(s, p, token)}
                              : int64_t{static_cast<uint32_t>(token) / static_cast<uint32_t>(p.q_len)};
  const int64_t lens_at = token_offset<Traits>(p, token, p.pages.lens_token_stride, p.pages.lens_request_stride);
  const int64_t swa_lens_at =
      token_offset<Traits>(p, token, p.pages.swa_lens_token_stride, p.pages.swa_lens_request_stride);
  const bool has_request = request >= 0;
  const int32_t lens = has_request ? p.pages.lens[lens_at] : 0;
  const int32_t hca_seq_len = has_request ? (load_bounds ? p.pages.hca_seq_lens[request] : p.pages.columns) : 0;
  const int32_t swa_len = has_swa_columns && load_bounds ? p.pages.swa_lens[swa_lens_at] : kSwaColumns;
  const int64_t slots =
      has_request ? dsv4_hca::compressed_slots(lens, hca_seq_len, p.pages.columns - kSwaColumns) : 0;
  len = static_cast<int>(kSwaColumns + slots);
  window = dsv4_hca::window_columns(swa_len);
}

// What the chunk walk of one token needs besides the chunks.
struct TokenScope {
  int64_t token;
  int len;          // active columns by lens (width without lens)
  int window;       // active SWA columns by seq_lens (128 without)
  float scale_log2; // bmm1_scale * log2(e)
  float sink;       // this thread's head's sink (threads < kHeads), -inf without sinks
  bool count_out_of_range;  // the counter is given, and this CTA is the token's first head group's (dim part 0)
  int32_t first_entry;      // this thread's gather-lane entry in the walk's first chunk (-1: none, or producers)
};

// The chunks a walk over the whole token needs (walked_chunk_count): those
// up to the end of the column group of its last active column. The groups
// past it are wholly masked; their folds change no bit but a -0 output's
// sign (fold_unwalked_chunks).
template <class Traits>
__device__ __forceinline__ int walked_chunks(const Dsv4Params& p, const TokenScope& scope) {
  static_assert(Traits::kChunkColumns == 64, "walked_chunk_count counts chunks of 64 columns");
  return walked_chunk_count(scope.len, p.chunks, p.chunks_per_group);
}

// A CTA's TokenScope (the window only where it holds SWA columns: with
// varlen seq_lens its search takes barriers). `sink`: -inf where the kernel
// leaves the sink to a later fold. first_column: the walk's first column
// where the math warps gather (-1 with producers): its entries are loaded
// first, so that their DRAM trip overlaps the lens and seq_lens loads.
template <class Traits>
__device__ __forceinline__ TokenScope token_scope(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                                  HeadGroup heads, bool has_swa_columns, float sink,
                                                  int first_column) {
  TokenScope scope;
  scope.first_entry = first_column >= 0 ? chunk_entry<Traits>(p, token, first_column) : -1;
  scope.token = token;
  if constexpr (Traits::kPageWalk) {
    page_walk_scope<Traits>(s, p, token, has_swa_columns, scope.len, scope.window);
  } else {
    scope.len = p.lens ? p.lens[lens_offset<Traits>(p, token)] : p.width;
    scope.window = p.seq_lens && has_swa_columns ? swa_window<Traits>(s, p, token) : kSwaColumns;
  }
  scope.scale_log2 = (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;
  scope.sink = sink;
  scope.count_out_of_range = p.out_of_range_count && heads.first == 0 && first_output_dim_block<Traits>() == 0;
  return scope;
}

}  // namespace sparse_decode::dsv4
