// PTX wrappers that the packed-row kernel needs beyond common/ptx.cuh.
#pragma once

#include <cstdint>

namespace sparse_decode::ptx {

// 8-byte global -> shared copy (the scale bytes of a packed row); src_bytes == 0
// writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Stores to a peer CTA's shared memory (an address from map_to_peer).
__device__ __forceinline__ void st_peer_f32x2(uint32_t peer_addr, float x, float y) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(peer_addr), "f"(x), "f"(y) : "memory");
}

// Full cluster barrier with release/acquire semantics: shared-memory writes
// before it are visible to every CTA of the cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

}  // namespace sparse_decode::ptx
