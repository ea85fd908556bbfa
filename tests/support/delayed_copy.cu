#include "support/delayed_copy.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace sparse_decode::testing {
namespace {

__global__ void delayed_copy_kernel(uint32_t* dst, const uint32_t* src, size_t words, unsigned delay_ns) {
  // Dependents may launch now; only their grid-dependency wait orders them after these writes.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  for (unsigned waited = 0; waited < delay_ns; waited += 1000) __nanosleep(1000);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < words; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i];
  }
}

}  // namespace

void launch_delayed_copy(void* dst, const void* src, size_t bytes, unsigned delay_ns, CUstream_st* stream) {
  delayed_copy_kernel<<<64, 256, 0, stream>>>(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src),
                                              bytes / 4, delay_ns);
}

}  // namespace sparse_decode::testing
