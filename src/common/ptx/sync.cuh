// Synchronization: programmatic dependent launch, mbarriers, named barriers, proxy fences, setmaxnreg.
#pragma once

#include <cstdint>

namespace sparse_decode::ptx {

// Programmatic dependent launch: wait for the grids this one depends on /
// let the next grid start its prologue.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
// Release form: the arriving thread's earlier shared-memory reads and writes come first.
__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Waits for the phase of `parity` to complete, acquiring at CTA scope (the
// KV tiles' barriers: bulk copies and this CTA's warps; an acquire at
// cluster scope invalidates L1 at every wait, CCTL.IVALL) or, for barriers
// that peers' DSMEM writes complete, at cluster scope.
template <bool kClusterScope>
__device__ __forceinline__ void mbarrier_wait_parity_at(uint32_t barrier, uint32_t parity) {
#define SPARSE_DECODE_TRY_WAIT(scope)                                                              \
  "{ .reg .pred ready;\n  mbarrier.try_wait.parity.acquire." scope ".shared::cta.b64 ready, [%1], %2;\n" \
  "  selp.u32 %0, 1, 0, ready; }\n"
  uint32_t done = 0;
  while (!done) {
    if constexpr (kClusterScope) {
      asm volatile(SPARSE_DECODE_TRY_WAIT("cluster") : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    } else {
      asm volatile(SPARSE_DECODE_TRY_WAIT("cta") : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    }
  }
#undef SPARSE_DECODE_TRY_WAIT
}
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t barrier, uint32_t parity) {
  mbarrier_wait_parity_at<false>(barrier, parity);
}
__device__ __forceinline__ void mbarrier_wait_parity_cluster(uint32_t barrier, uint32_t parity) {
  mbarrier_wait_parity_at<true>(barrier, parity);
}

// A CTA barrier among `threads` threads (whole warps) on hardware barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The same, reached by its threads from different places in the program
// (barrier.sync without .aligned): two warpgroups' own loops.
__device__ __forceinline__ void named_barrier_sync_unaligned(uint32_t id, uint32_t threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on hardware barrier `id` (of `threads` threads) without waiting: the
// signal of a producer/consumer handoff whose other side waits with named_barrier_sync.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers of the executing warpgroup's threads (all of its warps execute it):
// give some back to the CTA's pool, or take some from it (waits until there are).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Makes generic-proxy writes to shared memory (cp.async, st.shared) visible to wgmma.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Release proxy fence: orders this thread's generic-proxy accesses of its
// CTA's shared memory before async-proxy accesses (bulk copies) by the
// threads it then synchronizes with: a consumer handing a tile back for a
// refill, before its bar.arrive (docs/memory_model.md, section 4).
__device__ __forceinline__ void fence_proxy_async_release() {
  asm volatile("fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
}

}  // namespace sparse_decode::ptx
