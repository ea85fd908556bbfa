// The device conversion of convert_page_aligned_indices: two kernels over
// the tokens (a CTA of 128 threads takes one token at a time), after the
// report is cleared.
// - check_kernel: each token's first broken rule (convert_rules.h); a token
//   that breaks one adds 1 to error[0] and raises error[1] to INT32_MAX - t,
//   so that error[1] ends at INT32_MAX - (the first such token). Integer
//   adds and a max: the result does not depend on the order.
// - write_kernel: reads error[0]. Nonzero: CTA 0 alone turns error[1] into
//   the first refused token and writes its rule to error[2]; nothing else is
//   written. Zero: every token's outputs, and error[1] = -1.
// The outputs are the host conversion's (convert.cpp) bit for bit: both
// compute each value with the same function.
#include <cuda_runtime.h>

#include <climits>

#include "common/device_support.h"
#include "dsv4_hca/convert.h"

namespace sparse_decode::dsv4_hca {
namespace {

constexpr int kThreads = kConvertThreads;

// Tokens a CTA takes in turn: enough CTAs to fill the GPU, few enough that a
// huge T does not make a huge grid.
constexpr int64_t kMaxCtas = 8192;

// The first rule token t breaks (0 when none), on every thread of the CTA.
// Takes barriers: called by all of its threads.
__device__ int32_t token_rule(const ConvertParams& p, int64_t t, int32_t* shared_rule) {
  const TokenShape s = token_shape(p, t);
  const int32_t* row = p.indices + t * p.indices_stride;
  int32_t rule = threadIdx.x == 0 ? scalar_rule(p, t, s) : 0;
  for (int32_t c = threadIdx.x; c < s.window; c += kThreads) rule = first_rule(rule, window_rule(p, row, c));
  for (int64_t j = threadIdx.x; j < s.read_slots; j += kThreads) rule = first_rule(rule, slot_rule(p, row, j));
  if (threadIdx.x == 0) *shared_rule = INT_MAX;
  __syncthreads();
  if (rule != 0) atomicMin(shared_rule, rule);
  __syncthreads();
  const int32_t first = *shared_rule;
  __syncthreads();  // every thread has read it before it is cleared for the next token
  return first == INT_MAX ? 0 : first;
}

__global__ void __launch_bounds__(kThreads) check_kernel(const __grid_constant__ ConvertParams p) {
  __shared__ int32_t shared_rule;
  for (int64_t t = blockIdx.x; t < p.num_tokens; t += gridDim.x) {
    const int32_t rule = token_rule(p, t, &shared_rule);
    if (threadIdx.x == 0 && rule != 0) {
      atomicAdd(&p.error[0], 1);
      atomicMax(&p.error[1], static_cast<int32_t>(INT_MAX - t));  // T <= INT32_MAX: >= 1
    }
  }
}

__device__ void write_token(const ConvertParams& p, int64_t t) {
  const TokenShape s = token_shape(p, t);
  const int32_t* row = p.indices + t * p.indices_stride;
  int32_t* swa_rows = p.swa_rows + t * p.swa_rows_stride;
  for (int32_t c = threadIdx.x; c < kSwaColumns; c += kThreads) swa_rows[c] = swa_row_out(row, s, c);
  int32_t* pages = p.block_table + t * p.block_table_stride;
  for (int32_t k = threadIdx.x; k < p.max_pages; k += kThreads) pages[k] = page_out(p, row, s, k);
  if (threadIdx.x == 0) {
    p.swa_lens[t] = s.window;
    if (t % p.q_len == 0) p.hca_seq_lens[s.request] = hca_seq_len_out(p.seq_lens[s.request]);
  }
}

__global__ void __launch_bounds__(kThreads) write_kernel(const __grid_constant__ ConvertParams p) {
  __shared__ int32_t shared_rule;
  if (p.error[0] != 0) {
    if (blockIdx.x == 0) {  // only this CTA reads or writes error[1] and error[2] now
      const int64_t first = INT_MAX - int64_t{p.error[1]};
      const int32_t rule = token_rule(p, first, &shared_rule);
      if (threadIdx.x == 0) {
        p.error[1] = static_cast<int32_t>(first);
        p.error[2] = rule;
      }
    }
    return;
  }
  for (int64_t t = blockIdx.x; t < p.num_tokens; t += gridDim.x) write_token(p, t);
  if (blockIdx.x == 0 && threadIdx.x == 0) p.error[1] = -1;
}

}  // namespace

Status launch_convert(const ConvertParams& params, CUstream_st* stream) {
  ConvertParams p = params;
  const int64_t ctas = p.num_tokens < kMaxCtas ? p.num_tokens : kMaxCtas;
  const cudaError_t cleared =
      cudaMemsetAsync(p.error, 0, kConvertErrorWords * sizeof(int32_t), reinterpret_cast<cudaStream_t>(stream));
  if (Status status = cuda_status(cleared, "clearing the convert_page_aligned_indices report"); !status.ok()) {
    return status;
  }
  if (Status status = launch_kernel(reinterpret_cast<const void*>(&check_kernel),
                                    LaunchConfig(ctas, kThreads, 0, false, stream), &p,
                                    "launching the convert_page_aligned_indices check kernel");
      !status.ok()) {
    return status;
  }
  return launch_kernel(reinterpret_cast<const void*>(&write_kernel), LaunchConfig(ctas, kThreads, 0, false, stream),
                       &p, "launching the convert_page_aligned_indices write kernel");
}

}  // namespace sparse_decode::dsv4_hca
