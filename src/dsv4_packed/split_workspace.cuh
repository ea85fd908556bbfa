// Layout of the split path's workspace: the stream kernel's CTAs (split
// path) write their shares there and the combine kernel folds them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsv4_packed/stream_traits.cuh"

namespace sparse_decode::dsv4_packed {

// A share for each CTA of each (token, 16-head group) unit, share u * CTAs
// + r. A share holds math thread t's P V values of head h as 4 floats for
// each (dim block, 16-dim half): values[(slice * 2 + h) * kThreads + t],
// slice = 2 * dim block + half (a warp's store is 512 contiguous bytes); the
// thread's scale exponent of each head, exponents[h * kThreads + t]; every
// head's (running max, running sum). The combine kernel gives each (unit,
// warp) a CTA in which thread (h, slice, lane) folds one such float4 over
// the unit's shares.
struct SplitWorkspace {
  using T = StreamTraits;
  static constexpr int kSlices = 4;  // (dim block, 16-dim half) of a warp's 64 dims
  static constexpr size_t kValueBytes = size_t{kSlices} * 2 * T::kThreads * 16;
  static constexpr size_t kExponentBytes = size_t{2} * T::kThreads * sizeof(int32_t);
  static constexpr size_t kStatsBytes = size_t{T::kHeads} * 8;
  static constexpr size_t kShareBytes = kValueBytes + kExponentBytes + kStatsBytes;
  static constexpr size_t kAlignment = 16;
  static constexpr int kMaxShares = 16;  // CTAs a unit at most: the combine keeps every share's float4 in registers
  static constexpr int kCombineThreads = 2 * kSlices * 32;
  static_assert(kShareBytes % kAlignment == 0, "every share starts 16-byte aligned");
  static_assert(kValueBytes == T::kThreads * 32 * sizeof(float), "a math thread's 32 P V values");
};

}  // namespace sparse_decode::dsv4_packed
