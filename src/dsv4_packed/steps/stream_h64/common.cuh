// What every step of the packed stream kernel's 64-head form shares: the
// names of its configuration and shared-memory plan, its P V accumulator
// (the 16-head kernel's fragment a (dim tile, head tile)) and its two
// barriers (both math warpgroups; one warpgroup). The scale
// exponent arithmetic and the output are the 16-head kernel's
// (steps/stream/common.cuh, output.cuh).
#pragma once

#include "common/ptx/sync.cuh"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/stream_h64_smem.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

using Traits = StreamH64Traits;
using Smem = StreamH64Smem;
using stream::DimFragment;
using stream::HeadStats;
using stream::kNoExponent;
using stream::pow2;

// A warp's P V accumulator of one dim tile: its warpgroup's head tile t
// (heads 32g + 16t + lane / 4, + 8) over the tile's 64 dims.
using HeadTileFragments = DimFragment[Traits::kWarpgroupHeadTiles];
// The scale exponent of each (head tile, top or bottom head) of a thread.
using HeadTileExponents = int[Traits::kWarpgroupHeadTiles][2];

// Both math warpgroups (the q conversion).
__device__ __forceinline__ void math_sync() { ptx::named_barrier_sync(Traits::kMathBarrier, Traits::kThreads); }
// One math warpgroup's phases: the other runs its own chunk phase meanwhile.
__device__ __forceinline__ void warpgroup_sync(int warpgroup) {
  ptx::named_barrier_sync(Traits::kWarpgroupBarrier + warpgroup, Traits::kThreads / 2);
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
