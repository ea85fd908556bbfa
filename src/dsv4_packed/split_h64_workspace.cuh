// Layout of the 64-head split path's workspace: the 64-head form's CTAs
// (kSplitH64) write their shares there and its combine kernel folds them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsv4_packed/stream_h64_traits.cuh"

namespace sparse_decode::dsv4_packed {

// A share for each CTA of each (token, 64-head group) unit, share u * CTAs
// + r: the CTA's O before its normalization, FP32, head-major
// (values[head * 512 + dim]; O = value 2^exponent), each head's scale
// exponent and (running max, running sum). The combine kernel gives each
// (unit, head pair) a CTA in which a thread folds 4 dims of one head over
// the unit's shares.
struct SplitH64Workspace {
  using T = StreamH64Traits;
  static constexpr size_t kValueBytes = size_t{T::kHeads} * kHeadDim * sizeof(float);
  static constexpr size_t kExponentBytes = size_t{T::kHeads} * sizeof(int32_t);
  static constexpr size_t kStatsBytes = size_t{T::kHeads} * 2 * sizeof(float);
  static constexpr size_t kShareBytes = kValueBytes + kExponentBytes + kStatsBytes;
  static constexpr size_t kAlignment = 16;
  static constexpr int kMaxShares = 16;  // CTAs a unit at most: the combine keeps every share's float4 in registers
  static constexpr int kCombineHeads = 2;                                     // heads a combine CTA
  static constexpr int kCombineCtas = T::kHeads / kCombineHeads;              // combine CTAs a unit
  static constexpr int kThreadsPerHead = kHeadDim / 4;                         // 4 dims a thread
  static constexpr int kCombineThreads = kCombineHeads * kThreadsPerHead;
  static_assert(kShareBytes % kAlignment == 0, "every share starts 16-byte aligned");
  static_assert(kCombineThreads == 256 && kCombineCtas == 32, "a combine CTA: two heads' 512 dims, 4 a thread");
};

}  // namespace sparse_decode::dsv4_packed
