// The parameters, the support check and the launch of the merge kernel:
// one thread a vector, MergeTraits::kThreads vectors a CTA.
#include "merge/dispatch.h"

#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "common/device_support.h"
#include "common/launch.h"
#include "merge/instantiations/kernels.h"
#include "merge/traits.cuh"

namespace sparse_decode::merge {
namespace {

int64_t vector_count(const MergeStatesArgs& a) {
  return a.num_tokens * a.num_heads * (a.head_dim / MergeTraits::kVectorDims);
}

}  // namespace

MergeParams make_params(const MergeStatesArgs& a) {
  MergeParams p = {};
  for (int r = 0; r < a.num_ranks; ++r) {
    p.partial[r] = a.partial_of(r);
    p.lse[r] = a.lse_of(r);
  }
  p.partial_token_stride = a.partial_token_stride;
  p.partial_head_stride = a.partial_head_stride;
  p.lse_token_stride = a.lse_token_stride;
  p.lse_head_stride = a.lse_head_stride;
  p.out = a.out;
  p.out_token_stride = a.out_token_stride;
  p.out_head_stride = a.out_head_stride;
  p.out_lse = a.out_lse;
  p.out_lse_token_stride = a.out_lse_token_stride;
  p.out_lse_head_stride = a.out_lse_head_stride;
  p.ranks = a.num_ranks;
  p.heads = a.num_heads;
  p.vectors_per_head = a.head_dim / MergeTraits::kVectorDims;
  p.vectors = static_cast<uint32_t>(vector_count(a));
  return p;
}

Status kernels_support(const MergeStatesArgs& args) {
  if (Status status = hopper_device_status("merge_states: "); !status.ok()) return status;
  const int64_t limit = INT_MAX;  // vectors, and the 32-bit index math of the kernel
  if (args.num_tokens > limit / args.num_heads || vector_count(args) > limit) {
    return Status::NotSupported("merge_states: num_tokens * num_heads * head_dim / 8 must be at most 2^31 - 1, got " +
                                std::to_string(args.num_tokens) + " * " + std::to_string(args.num_heads) + " * " +
                                std::to_string(args.head_dim) + " / 8");
  }
  return Status::Ok();
}

Status launch(const MergeStatesArgs& args, CUstream_st* stream) {
  MergeParams p = make_params(args);
  const int64_t ctas = (int64_t{p.vectors} + MergeTraits::kThreads - 1) / MergeTraits::kThreads;
  return launch_kernel(merge_kernel_for(args.partial_dtype, args.out_dtype, args.num_ranks),
                       LaunchConfig(ctas, MergeTraits::kThreads, 0, args.enable_pdl, stream), &p,
                       "launching the merge_states kernel");
}

}  // namespace sparse_decode::merge
