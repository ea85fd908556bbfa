// The 64-head split path's combine kernel (kSplitH64): folds the shares
// that the 64-head form's CTAs wrote to the workspace and stores the output.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/load.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/split_h64_workspace.cuh"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/stream/fold.cuh"
#include "dsv4_packed/steps/stream/output.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed {

// One (token, 64-head group) unit's head pair `blockIdx.x % 32` a CTA:
// thread t folds dims 4 (t % 128) .. + 3 of head 2 (pair) + t / 128 over
// the unit's shares in rank order (steps/stream/fold.cuh, as the 16-head
// combine does), then stores them as BF16 (8 bytes a thread, a head's row by 128
// threads). kMax >= p.split_ctas bounds the shares loaded at once, all
// before the fold (volatile: ptxas would sink plain loads into the fold's
// per-share branches). kGeneral: the general form (request views of out and
// lse, lse with the sink), else the plain form.
template <int kMax, bool kGeneral>
__global__ void __launch_bounds__(SplitH64Workspace::kCombineThreads)
    combine_h64_kernel(const __grid_constant__ Params p) {
  using Workspace = SplitH64Workspace;
  static_assert(kMax <= Workspace::kMaxShares, "at most kMaxShares shares a unit");
  const int head_groups = p.num_heads / StreamH64Traits::kHeads;
  const int64_t unit_index = blockIdx.x / Workspace::kCombineCtas;
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * StreamH64Traits::kHeads;
  const int head = static_cast<int>(blockIdx.x % Workspace::kCombineCtas) * Workspace::kCombineHeads +
                   static_cast<int>(threadIdx.x) / Workspace::kThreadsPerHead;
  const int dim = 4 * (static_cast<int>(threadIdx.x) % Workspace::kThreadsPerHead);
  const float sink_log2 = p.sinks ? p.sinks[first_head + head] * kLog2e : -INFINITY;
  ptx::grid_dependency_wait();  // the split kernel's shares are complete and visible
  ptx::launch_dependents();

  const int shares = p.split_ctas;
  float4 values[kMax];
  int exponents[kMax];
  float2 stats[kMax];
#pragma unroll
  for (int r = 0; r < kMax; ++r) {
    const uint8_t* record = p.workspace + (unit_index * shares + min(r, shares - 1)) * Workspace::kShareBytes;
    values[r] = ptx::load_l2(reinterpret_cast<const float4*>(record) + (head * kHeadDim + dim) / 4);
    exponents[r] = ptx::load_l2(reinterpret_cast<const int32_t*>(record + Workspace::kValueBytes) + head);
    stats[r] = ptx::load_l2(
        reinterpret_cast<const float2*>(record + Workspace::kValueBytes + Workspace::kExponentBytes) + head);
  }
  stream::ShareFold folded;  // every dim carries its head's scale exponent
#pragma unroll
  for (int r = 0; r < kMax; ++r) {
    if (r >= shares) break;
    folded.add(values[r], exponents[r], stats[r], true);
  }
  const float4 o = folded.o;
  float* lse = p.lse && dim == 0
                   ? p.lse + token_offset<kGeneral>(p, token, p.lse_token_stride, p.lse_request_stride) + first_head +
                         head
                   : nullptr;
  const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + first_head + head : nullptr;
  const float scale = stream::head_output_scale<kGeneral>(folded.total, sink_log2, lse, lse_sink);
  const stream::OutputScale value(scale, stream::output_exponent(folded.exponent));
  uint16_t* out = p.out + token_offset<kGeneral>(p, token, p.out_token_stride, p.out_request_stride) +
                  (first_head + head) * p.out_head_stride + dim;
  *reinterpret_cast<uint2*>(out) =
      make_uint2(ptx::bf16x2_bits(value(o.x), value(o.y)), ptx::bf16x2_bits(value(o.z), value(o.w)));
}

}  // namespace sparse_decode::dsv4_packed
