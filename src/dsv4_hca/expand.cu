// The expand kernel of dsv4_decode_hca's GPU path: HCA metadata -> the
// section-1 table [T, W'] and lens [T] (docs/formats/hca_layout.md, "The GPU path").
// Column c < 128 of token t: swa_rows[t, c] when c < clamp(swa_lens[t], 0,
// 128), else -1. Column 128 + j: for j < n_t (SPEC section 3's count), page =
// block_table[t, j / ps]; -1 for a negative page, min(page * ps + j % ps,
// INT32_MAX) otherwise (a page past the pool gives an index past it: the
// pool has at most INT32_MAX rows on this path, so section 1 masks and counts
// it); -1 past n_t. lens = 128 + n_t, so section 1's lens rule cuts nothing
// in the window. This is testing::expand_to_section1, column for column;
// the per-entry rules are in expand_rules.h, tested on the CPU.
#include <cuda_runtime.h>

#include <climits>

#include "common/device_support.h"
#include "common/ptx/sync.cuh"
#include "dsv4_hca/expand.h"
#include "dsv4_hca/expand_rules.h"

namespace sparse_decode::dsv4_hca {
namespace {

constexpr int kThreads = kExpandThreads;

// The request of token t, or -1 (varlen offsets that hold no such token).
// Uniform q_len: t / q_len (validation made T == B * q_len). Varlen: the
// largest b with cum[b] <= t, found by a 128-ary search over the requests
// (two rounds of one load a thread up to 16384 requests), then kept only if
// t < cum[b + 1]. With a non-decreasing cum_seq_lens_q (section 1's kernels
// assume it too) this is the one request that holds t, as
// reference::locate_token finds it; other offsets give some request whose
// range holds t or -1, and never a read out of bounds. Called by every
// thread of the CTA (it takes barriers); returns the same value to all.
__device__ int32_t request_of(const ExpandParams& p, int64_t t, int32_t* shared) {
  if (!p.cum_seq_lens_q) return static_cast<int32_t>(t / p.q_len);
  int32_t lo = 0, hi = p.num_requests;  // the answer, if any, lies in [lo, hi)
  while (hi - lo > 1) {
    const int32_t stride = search_stride(lo, hi);
    if (threadIdx.x == 0) *shared = lo;  // pivot 0 is lo: the fallback
    __syncthreads();
    const int64_t pivot = lo + int64_t{threadIdx.x} * stride;
    if (threadIdx.x > 0 && pivot < hi && p.cum_seq_lens_q[pivot] <= t) atomicMax(shared, static_cast<int32_t>(pivot));
    __syncthreads();
    lo = *shared;
    hi = min(hi, lo + stride);
    __syncthreads();  // every thread has read it before it is written again
  }
  return request_if_held(p.cum_seq_lens_q, lo, t);
}

__global__ void __launch_bounds__(kThreads) expand_kernel(const __grid_constant__ ExpandParams p) {
  __shared__ int32_t shared;
  const int64_t t = blockIdx.x;
  // PDL: the previous grid may write this kernel's inputs, and the previous
  // call's section-1 kernels may still read its table in this workspace
  // (they release their dependents early): wait before any load or store.
  ptx::grid_dependency_wait();

  const int32_t b = request_of(p, t, &shared);
  const int64_t slots =
      b >= 0 ? compressed_slots(p.lens[t], p.hca_seq_lens[b], int64_t{p.max_pages} * p.page_size) : 0;
  const int32_t window = window_columns(p.swa_lens[t]);
  const int32_t* swa = p.swa_rows + t * p.swa_rows_stride;
  const int32_t* table = p.block_table + t * p.block_table_stride;
  int4* row = reinterpret_cast<int4*>(p.indices + t * p.width);
  for (int32_t q = threadIdx.x; q < p.width / 4; q += kThreads) {
    const int32_t c = 4 * q;
    int4 v;
    if (c < kSwaColumns) {
      v = c < window ? *reinterpret_cast<const int4*>(swa + c) : make_int4(-1, -1, -1, -1);
      if (c + 1 >= window) v.y = -1;
      if (c + 2 >= window) v.z = -1;
      if (c + 3 >= window) v.w = -1;
    } else {
      const int32_t j = c - kSwaColumns;
      v = make_int4(compressed_index(table, p.page_size, slots, j),
                    compressed_index(table, p.page_size, slots, j + 1),
                    compressed_index(table, p.page_size, slots, j + 2),
                    compressed_index(table, p.page_size, slots, j + 3));
    }
    row[q] = v;
  }
  if (threadIdx.x == 0) p.expanded_lens[t] = static_cast<int32_t>(kSwaColumns + slots);
  // The section-1 kernel that follows waits (griddepcontrol.wait) for this
  // whole grid to complete and its stores to be visible before it reads the
  // table, wherever this is called; calling it after the stores only keeps
  // its CTAs from taking SM slots while this grid still has work.
  ptx::launch_dependents();
}

}  // namespace

int32_t expanded_width(int32_t max_pages, int64_t page_size) {
  if (max_pages < 1 || page_size < 1 || page_size > kMaxCompressedColumns ||
      int64_t{max_pages} * page_size > kMaxCompressedColumns) {
    return 0;
  }
  return static_cast<int32_t>((kSwaColumns + int64_t{max_pages} * page_size + 3) / 4 * 4);
}

Status launch_expand(const ExpandParams& params, bool pdl, CUstream_st* stream) {
  ExpandParams p = params;
  return launch_kernel(reinterpret_cast<const void*>(&expand_kernel),
                       LaunchConfig(params.num_tokens, kThreads, 0, pdl, stream), &p,
                       "launching the dsv4_decode_hca expand kernel");
}

}  // namespace sparse_decode::dsv4_hca
