// Thread-block clusters and distributed shared memory: the cluster barrier, peer addresses, st.async.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sparse_decode::ptx {

// Release form: orders this thread's earlier operations (an mbarrier's
// initialization and expected bytes) before the peers see the barrier
// complete. Compiles to a GPU-scope fence: use it where nothing is in flight.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
// Relaxed form: no fence. It publishes an mbarrier initialization fenced by
// fence.mbarrier_init.release.cluster (mbarrier_init), as CUTLASS's pipelines
// do. Before peers overwrite a tile, fence_release_shared_cta() comes first.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
// Release of this thread's accesses of its CTA's shared memory at cluster
// scope, without the GPU-scope fence of cluster_arrive_release: put before
// a relaxed arrive after which peers overwrite this CTA's tiles
// (docs/memory_model.md, section 6).
__device__ __forceinline__ void fence_release_shared_cta() {
  asm volatile("fence.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
}
// Waits for the cluster barrier (acquire).
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t count;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(count));
  return count;
}

// The address of the same shared-memory location in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t map_to_peer(uint32_t smem_addr, uint32_t rank) {
  uint32_t result;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(result) : "r"(smem_addr), "r"(rank));
  return result;
}

// Loads from a peer CTA's shared memory (an address from map_to_peer),
// ordered after the peer's writes by a cluster barrier between them.
__device__ __forceinline__ float4 ld_peer_float4(uint32_t peer_addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(peer_addr)
               : "memory");
  return v;
}
__device__ __forceinline__ float ld_peer_float(uint32_t peer_addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(peer_addr) : "memory");
  return v;
}

// Stores to a peer CTA's shared memory that complete bytes on its mbarrier
// (fire and forget: the receiver waits on its barrier, the sender never waits).
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, float4 value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   peer_addr),
               "f"(value.x), "f"(value.y), "f"(value.z), "f"(value.w), "r"(peer_barrier)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, uint2 value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];\n" ::"r"(peer_addr),
               "r"(value.x), "r"(value.y), "r"(peer_barrier)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, uint32_t value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(peer_addr),
               "r"(value), "r"(peer_barrier)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t peer_addr, float2 value, uint32_t peer_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(
                   peer_addr),
               "f"(value.x), "f"(value.y), "r"(peer_barrier)
               : "memory");
}

}  // namespace sparse_decode::ptx
