// What every step of the packed stream kernel's 64-head form shares: the
// names of its configuration and shared-memory plan, the wgmma fragment
// coordinates, a head's statistics, the barriers and the shared-memory
// descriptors of the Q and key tiles. The scale exponent arithmetic is the
// 16-head kernel's (steps/stream/common.cuh).
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/stream_h64_smem.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

using Traits = StreamH64Traits;
using Smem = StreamH64Smem;
using stream::HeadStats;
using stream::kNoExponent;
using stream::pow2;

// A wgmma accumulator (m64nN, FP32) of a warpgroup's thread: rows (heads)
// 16 w + lane / 4 (values 4j, 4j + 1 of n-block j) and + 8 (4j + 2, 4j + 3),
// columns 8j + 2 (lane % 4) and + 1.
__device__ __forceinline__ int fragment_row(int half) {
  return 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4 + 8 * half;
}
__device__ __forceinline__ int fragment_column(int j) { return 8 * j + 2 * (threadIdx.x % 4); }

// Both math warpgroups, at one place of the program (q's store).
__device__ __forceinline__ void math_sync() { ptx::named_barrier_sync(Traits::kMathBarrier, Traits::kThreads); }
// Both math warpgroups, each from its own walk (steps/stream_h64/walk.cuh).
__device__ __forceinline__ void walk_sync() {
  ptx::named_barrier_sync_unaligned(Traits::kMathBarrier, Traits::kThreads);
}

// The Q tile (A of S) and the key tile (B of S: K-major; B of P V: N-major),
// core matrices 16 bytes x 8 rows: along K (dims) 128 bytes apart, along the
// rows 8 x 64 pieces. For P V the key tile's K is the rows and N the dims.
__device__ __forceinline__ uint64_t q_descriptor(const Smem& s) {
  return ptx::wgmma_descriptor(ptx::smem_address(&s.q[0][0][0][0]), Traits::kCoreBytes, Traits::kRowGroupBytes);
}
__device__ __forceinline__ uint64_t key_descriptor(const Smem& s) {
  return ptx::wgmma_descriptor(ptx::smem_address(&s.keys[0][0][0][0]), Traits::kCoreBytes, Traits::kRowGroupBytes);
}
__device__ __forceinline__ uint64_t value_descriptor(const Smem& s, int first_dim) {
  return ptx::wgmma_descriptor(ptx::smem_address(&s.keys[0][first_dim / 8][0][0]), Traits::kRowGroupBytes,
                               Traits::kCoreBytes);
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
