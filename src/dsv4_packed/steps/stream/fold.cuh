// The combine kernels' fold of a unit's shares, in rank order (the 16-head
// split path's and the 64-head one's): each share's weight against the
// joint max, and where the values carry a scale exponent a common one from
// the larger weighted share (scale exponent plus the weight's exponent), so
// that the share that dominates keeps its bits.
#pragma once

#include <cmath>

#include "common/math.cuh"
#include "dsv4_packed/steps/stream/common.cuh"

namespace sparse_decode::dsv4_packed::stream {

// A thread's 4 values of a head folded over the shares so far; o carries
// 2^exponent where the shares' values carry scale exponents.
struct ShareFold {
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  int exponent = kNoExponent;
  HeadStats total{-INFINITY, 0.0f};

  // The next share: its values, scale exponent (used where `scaled`) and (max, sum).
  __device__ __forceinline__ void add(const float4& values, int share_exponent, const float2& stats, bool scaled) {
    const float joint_max = fmaxf(total.max, stats.x);
    const float own_weight = total.max == -INFINITY ? 0.0f : ptx::exp2_approx(total.max - joint_max);
    const float share_weight = stats.x == -INFINITY ? 0.0f : ptx::exp2_approx(stats.x - joint_max);
    total = HeadStats{joint_max, total.sum * own_weight + stats.y * share_weight};
    float own_factor = own_weight, share_factor = share_weight;
    if (scaled) {
      const int common =
          max(max(weighted_exponent(exponent, own_weight), weighted_exponent(share_exponent, share_weight)), -127);
      own_factor = own_weight > 0.0f ? own_weight * pow2(exponent - common) : 0.0f;
      share_factor = share_weight > 0.0f ? share_weight * pow2(share_exponent - common) : 0.0f;
      exponent = common;
    }
    o.x = o.x * own_factor + values.x * share_factor, o.y = o.y * own_factor + values.y * share_factor;
    o.z = o.z * own_factor + values.z * share_factor, o.w = o.w * own_factor + values.w * share_factor;
  }
};

}  // namespace sparse_decode::dsv4_packed::stream
