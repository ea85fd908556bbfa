// The fold of column group results into a token's output, in group order
// and with the same float operations in every kernel, and the output's store
// (BF16 granules and lse).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/granules.h"
#include "common/math.cuh"
#include "common/ptx/convert.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {

// A token's output so far, per head: the fold of its groups in group order.
// Group c (statistics m_c, l_c; P V sum a_c, relative to its own max m_c)
// enters as
//   O <- a_c * take + O * keep,  keep = 2^(M - M'), take = 2^(m_c - M'),
//   L <- L * keep + take * l_c,  with M' = max(M, m_c):
// the same float operations in every kernel. a_c travels in FP32 (a rounding
// to FP16 would cost 2.5 instructions an element more in every fold).
struct FoldState {
  float max = -INFINITY;  // log2 domain
  float sum = 0.0f;
};

struct FoldWeights {
  float keep;  // on the output so far
  float take;  // on the group's P V sum
};

__device__ __forceinline__ FoldWeights fold_group(FoldState& state, float group_max, float group_sum) {
  const float new_max = fmaxf(state.max, group_max);
  const float keep = state.max == -INFINITY ? 0.0f : ptx::exp2_approx(state.max - new_max);
  const float take = group_max == -INFINITY ? 0.0f : ptx::exp2_approx(group_max - new_max);
  state.sum = __fmaf_rn(state.sum, keep, __fmul_rn(take, group_sum));
  state.max = new_max;
  return {keep, take};
}

__device__ __forceinline__ float fold_value(float output, FoldWeights w, float group_value) {
  return __fmaf_rn(group_value, w.take, __fmul_rn(output, w.keep));
}

// Factor on the folded output: bmm2 over the softmax denominator, sink included.
// A token with no active column gets zeros (and lse -inf), sink or not.
__device__ __forceinline__ float output_scale(const FoldState& state, float sink_log2, float bmm2) {
  if (state.max == -INFINITY) return 0.0f;
  return bmm2 / (state.sum + ptx::exp2_approx(sink_log2 - state.max));
}

// Stores a granule of a head's output as BF16: its 4 values in travel order,
// scaled; `first_dim` is granule_dim(granule, 0).
template <class Traits>
__device__ __forceinline__ void store_granule(uint16_t* out_head, int first_dim, float v0, float v1, float v2,
                                              float v3) {
  if constexpr (!Traits::kBf16) {
    *reinterpret_cast<uint2*>(out_head + first_dim) = make_uint2(ptx::bf16x2_bits(v0, v1), ptx::bf16x2_bits(v2, v3));
  } else {
    // Dims d, d + 1 hold v0, v2; dims d + 8, d + 9 hold v1, v3.
    *reinterpret_cast<uint32_t*>(out_head + first_dim) = ptx::bf16x2_bits(v0, v2);
    *reinterpret_cast<uint32_t*>(out_head + first_dim + 8) = ptx::bf16x2_bits(v1, v3);
  }
}

// A group's P V sum as it leaves a CTA (the cluster kernel's DSMEM sends,
// the split kernel's workspace): calls emit(granule, head, values) for each
// granule of this thread's P V fragment and each of its heads (16t + lane / 4
// and 16t + lane / 4 + 8 of head tile t); values are the granule's 4 FP32
// values in travel order (granule_dim).
template <class Traits, class Emit>
__device__ __forceinline__ void emit_group_values(const OutputFragment<Traits>& acc, Emit&& emit) {
  static_assert(Traits::kDimParts == 1, "the split and cluster kernels send all of a warp's dims");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < Traits::kHeadTiles; ++t) {
    const int head = 16 * t + lane / 4;
#pragma unroll
    for (int block = 0; block < Traits::kDimBlocks; ++block)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int granule = (warp * Traits::kDimsPerWarp + block * 32 + half * 16) / Traits::kGranuleDims + lane % 4;
        const float(&even)[4] = acc[t][block][half][0];
        const float(&odd)[4] = acc[t][block][half][1];
        emit(granule, head, make_float4(even[0], odd[0], even[1], odd[1]));
        emit(granule, head + 8, make_float4(even[2], odd[2], even[3], odd[3]));
      }
  }
}

__device__ __forceinline__ float output_lse(const FoldState& state) {
  return state.max == -INFINITY ? -INFINITY : (state.max + __log2f(state.sum)) * kLn2;
}

// lse with the sink term (SinkTerm::kInOutputAndLse): log(sum_c exp(s_c) +
// exp(sink)), natural log, from the fold state and the head's sink (log2
// domain, and `sink` as given); output_lse without a sink. The sink alone
// (a token without an active column, a sink of +inf, or one whose log2 form
// overflows: sink > FLT_MAX / log2(e), where it outweighs every score) is
// returned as given.
__device__ __forceinline__ float output_lse_with_sink(const FoldState& state, float sink_log2, float sink) {
  if (sink_log2 == -INFINITY) return output_lse(state);
  if (state.max == -INFINITY || sink_log2 == INFINITY) return sink;
  const float max = fmaxf(state.max, sink_log2);
  const float sum = __fmaf_rn(state.sum, ptx::exp2_approx(state.max - max), ptx::exp2_approx(sink_log2 - max));
  return (max + __log2f(sum)) * kLn2;
}

// The lse a head stores: with the sink where the general form's call asks
// for it (lse_sink: the head's sink, nullptr otherwise or without sinks),
// else output_lse (the plain form always).
template <class Traits>
__device__ __forceinline__ float stored_lse(const FoldState& state, float sink_log2, const float* lse_sink) {
  if constexpr (Traits::kGeneral) {
    if (lse_sink) return output_lse_with_sink(state, sink_log2, *lse_sink);
  }
  return output_lse(state);
}

// Folds the `groups` group results of head threadIdx.x % kHeads in group order,
// scales and stores BF16 (and lse, when lse_head is given: stored_lse). The output's 128
// granules are dealt to `owners` CTAs as in the cluster kernel (granule g to
// CTA g % owners); this one is `rank` and serves local granules
// threadIdx.x / kHeads, + kThreads / kHeads, ... of its own (a combine CTA
// of fewer threads has one granule a thread: owned <= threads / kHeads).
// stats(c): group c's (max, sum); values(c, local): its 4 FP32 P V values
// of the local granule. kGroups >= groups bounds the unrolled loops (groups
// past `groups` are skipped).
template <class Traits, int kGroups, class Stats, class Values>
__device__ __forceinline__ void fold_groups(int groups, int rank, int owners, int heads, float sink_log2, float bmm2,
                                            uint16_t* out_head, float* lse_head, const float* lse_sink, Stats&& stats,
                                            Values&& values) {
  constexpr int kHeads = Traits::kHeads;
  constexpr int kGranuleStride = Traits::kThreads / kHeads;
  const int owned = owned_granules(Traits::kGranules, rank, owners);
  const int head = threadIdx.x % kHeads;
  if (head >= heads) return;  // a silent head of H = 8

  // Every group's statistics and the first granule's values load at once,
  // before the weights (the combine kernel reads them from L2: one round
  // trip instead of one a group, or two). Groups past `groups` load group
  // 0's again and are not used: groups >= 1 (a token has at least 2; the
  // cluster kernel's own-group fold, skip bit 2, passes 1).
  const int first_local = threadIdx.x / kHeads;
  float2 group_stats[kGroups];
  float4 first_parts[kGroups];
#pragma unroll
  for (int c = 0; c < kGroups; ++c) {
    const int loaded = c < groups ? c : 0;
    group_stats[c] = stats(loaded);
    if (first_local < owned) first_parts[c] = values(loaded, first_local);
  }
  FoldState state;
  FoldWeights weights[kGroups];
#pragma unroll
  for (int c = 0; c < kGroups; ++c) {
    if (c < groups) weights[c] = fold_group(state, group_stats[c].x, group_stats[c].y);
  }
  const float scale = output_scale(state, sink_log2, bmm2);
  const auto fold_granule = [&](int local, auto&& part_of) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kGroups; ++c) {
      if (c < groups) {
        const float4 part = part_of(c);
        o.x = fold_value(o.x, weights[c], part.x), o.y = fold_value(o.y, weights[c], part.y);
        o.z = fold_value(o.z, weights[c], part.z), o.w = fold_value(o.w, weights[c], part.w);
      }
    }
    store_granule<Traits>(out_head, granule_dim<Traits>(local * owners + rank, 0), o.x * scale, o.y * scale,
                          o.z * scale, o.w * scale);
  };
  if (first_local < owned) fold_granule(first_local, [&](int c) { return first_parts[c]; });
  for (int local = first_local + kGranuleStride; local < owned; local += kGranuleStride) {
    fold_granule(local, [&](int c) { return values(c, local); });
  }
  if (lse_head) *lse_head = stored_lse<Traits>(state, sink_log2, lse_sink);
}

// Calls fold(std::integral_constant<int, kGroups>) with a bound kGroups >=
// groups for fold_groups: exact for DeepSeek-V4's widths (128: 2 groups,
// 640: 10), the next bound otherwise.
template <int kMaxGroups, class Fold>
__device__ __forceinline__ void with_group_bound(int groups, Fold&& fold) {
  if (groups == 2) {
    fold(std::integral_constant<int, 2>{});
  } else if (groups <= 4) {
    fold(std::integral_constant<int, 4>{});
  } else if (groups <= 8) {
    fold(std::integral_constant<int, 8>{});
  } else if (groups == 10) {
    fold(std::integral_constant<int, 10>{});
  } else {
    fold(std::integral_constant<int, kMaxGroups>{});
  }
}

// Calls fold(std::integral_constant<int, kGroups>) with kGroups == groups
// (2 <= groups <= kMaxGroups; nothing otherwise): the combine kernel folds
// with the exact count, so every load it issues is used and none sits
// behind a `c < groups` branch (ptxas sinks such loads into the fold: one
// L2 round trip a group; docs/kernels/split.md).
template <int kMaxGroups, class Fold, int... kOffsets>
__device__ __forceinline__ void with_group_count(int groups, Fold&& fold, std::integer_sequence<int, kOffsets...>) {
  (void)((groups == kOffsets + 2 ? (fold(std::integral_constant<int, kOffsets + 2>{}), true) : false) || ...);
}
template <int kMaxGroups, class Fold>
__device__ __forceinline__ void with_group_count(int groups, Fold&& fold) {
  with_group_count<kMaxGroups>(groups, fold, std::make_integer_sequence<int, kMaxGroups - 1>{});
}

}  // namespace sparse_decode::dsv4
