// The CTA's barriers around the KV tiles: the math warps' own barrier, and
// the KV tiles' rows_landed barriers (one arrival a copying warp a phase).
#pragma once

#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {

// A barrier among the math warps: __syncthreads without producers; with a
// producer warpgroup, hardware barrier 1 among the kThreads math threads
// (the producers take no part in it; they wait on the KV tiles' own barriers).
template <class Traits>
__device__ __forceinline__ void math_sync() {
  if constexpr (Traits::kProducerWarps == 0) {
    __syncthreads();
  } else {
    ptx::named_barrier_sync(Traits::kMathBarrier, Traits::kThreads);
  }
}

// The KV tiles' barriers (one arrival a copying warp a phase), initialized by
// load_query before any copy into shared memory and a CTA barrier.
template <class Traits>
__device__ __forceinline__ void init_tile_barriers(ChunkSmem<Traits>& s) {
  constexpr int kCopyingWarps = Traits::kProducerWarps > 0 ? Traits::kProducerWarps : Traits::kWarps;
  if (threadIdx.x < Traits::kKvTiles) {
    ptx::mbarrier_init(ptx::smem_address(&s.rows_landed[threadIdx.x]), kCopyingWarps);
  }
  __syncthreads();
}

// Waits for use `use` (0, 1, ...) of KV tile `kv_tile` to land.
template <class Traits>
__device__ __forceinline__ void wait_tile(ChunkSmem<Traits>& s, int kv_tile, int use) {
  ptx::mbarrier_wait_parity(ptx::smem_address(&s.rows_landed[kv_tile]), use & 1);
}

}  // namespace sparse_decode::dsv4
