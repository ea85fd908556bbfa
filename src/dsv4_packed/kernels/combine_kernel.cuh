// The packed split path's combine kernel: folds the shares that the stream
// kernel's CTAs wrote to the workspace and stores the output.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/math.cuh"
#include "common/ptx/load.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/split_workspace.cuh"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/stream/fold.cuh"
#include "dsv4_packed/steps/stream/output.cuh"
#include "dsv4_packed/steps/stream/shares.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed {

// One (token, head group) unit's warp `blockIdx.x % 8` a CTA: thread (h,
// slice, lane) folds head lane / 4 + 8h of walker thread (warp, lane)'s
// slice over the unit's shares in rank order (as the pair folds its two
// halves: weights against the joint max, a common scale exponent from the
// larger weighted share: steps/stream/fold.cuh), then stores it as the
// stream kernel does.
// kMax >= p.split_ctas bounds the shares loaded at once (its registers: a
// combine CTA that holds fewer leaves room for split CTAs on its SM while it
// waits for them under PDL). kGeneral: the general form (request views of
// out and lse, lse with the sink), else the plain form.
template <int kMax, bool kGeneral>
__global__ void __launch_bounds__(SplitWorkspace::kCombineThreads) combine_kernel(const __grid_constant__ Params p) {
  using Traits = StreamTraits;
  using Workspace = SplitWorkspace;
  static_assert(kMax <= Workspace::kMaxShares, "at most kMaxShares shares a unit");
  const int head_groups = (p.num_heads + Traits::kHeads - 1) / Traits::kHeads;
  const int64_t unit_index = blockIdx.x / Traits::kWarps;
  const int warp = static_cast<int>(blockIdx.x % Traits::kWarps);
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * Traits::kHeads;
  const int count = min(Traits::kHeads, p.num_heads - first_head);
  const int lane = threadIdx.x % 32, slice = (threadIdx.x / 32) % Workspace::kSlices;
  const int h = threadIdx.x / (32 * Workspace::kSlices);
  const int head = lane / 4 + 8 * h, walker = warp * 32 + lane;
  const float sink_log2 = p.sinks && head < count ? p.sinks[first_head + head] * kLog2e : -INFINITY;
  ptx::grid_dependency_wait();  // the split kernel's shares are complete and visible
  ptx::launch_dependents();
  if (head >= count) return;  // H = 8: the padded rows

  // Every share's values, scale exponent and statistics load at once. With
  // kMax shares (exact) every load is used; with fewer, shares past the
  // unit's load share 0 again and are not used, and the loads are volatile:
  // ptxas sinks plain ones into the fold's per-share branches, one L2 round
  // trip a share. The scale exponents are volatile either way (their uses sit
  // in the `scaled` branch); each thread loads its own, so no L1 reuse is lost.
  const int shares = p.split_ctas;
  const auto fold = [&](auto exact) {
    constexpr bool kExact = decltype(exact)::value;
    const int share_count = kExact ? kMax : shares;
    float4 values[kMax];
    int exponents[kMax];
    float2 stats[kMax];
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      const uint8_t* record = stream::share_record(p, unit_index * shares + (r < share_count ? r : 0));
      const float4* value = &reinterpret_cast<const float4*>(record)[(slice * 2 + h) * Traits::kThreads + walker];
      const int32_t* exponent_of =
          &reinterpret_cast<const int32_t*>(record + Workspace::kValueBytes)[h * Traits::kThreads + walker];
      const float2* stat =
          &reinterpret_cast<const float2*>(record + Workspace::kValueBytes + Workspace::kExponentBytes)[head];
      values[r] = kExact ? *value : ptx::load_l2(value);
      exponents[r] = ptx::load_l2(exponent_of);
      stats[r] = kExact ? *stat : ptx::load_l2(stat);
    }
    const bool scaled = warp < Traits::kScaleTiles;  // the BF16 dims (warp 7) carry no scale exponent
    stream::ShareFold folded;
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      if (r >= share_count) break;
      folded.add(values[r], exponents[r], stats[r], scaled);
    }
    float* lse = p.lse && warp == 0 && slice == 0 && lane % 4 == 0
                     ? p.lse + token_offset<kGeneral>(p, token, p.lse_token_stride, p.lse_request_stride) +
                           first_head + head
                     : nullptr;
    const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + first_head + head : nullptr;
    const float scale = stream::head_output_scale<kGeneral>(folded.total, sink_log2, lse, lse_sink);
    uint16_t* out = p.out + token_offset<kGeneral>(p, token, p.out_token_stride, p.out_request_stride) +
                    (first_head + head) * p.out_head_stride;
    stream::store_head_slice(out, warp, lane % 4, slice / 2, slice % 2, folded.o, scale,
                             stream::output_exponent(folded.exponent));
  };
  if (shares == kMax) {
    fold(std::true_type{});
  } else {
    fold(std::false_type{});
  }
}

}  // namespace sparse_decode::dsv4_packed
