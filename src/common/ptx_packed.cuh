// PTX wrappers that the packed-row kernel needs beyond common/ptx.cuh.
#pragma once

#include <cstdint>

namespace sparse_decode::ptx {

// 8-byte global -> shared copy (the scale bytes of a packed row); src_bytes == 0
// writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

}  // namespace sparse_decode::ptx
