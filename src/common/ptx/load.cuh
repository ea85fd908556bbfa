// Volatile global loads (served by L2) that the compiler issues where they are written.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sparse_decode::ptx {

// Volatile global loads (served by L2): neither the compiler nor ptxas may
// drop one or sink it into the branch that uses its value, so a run of them
// issues at once (the combine kernels' loads; plain loads were sunk into the
// fold's per-group branches, one L2 round trip a group).
__device__ __forceinline__ float2 load_l2(const float2* pointer) {
  float2 v;
  asm volatile("ld.volatile.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "l"(pointer));
  return v;
}
__device__ __forceinline__ uint16_t load_l2(const uint16_t* pointer) {
  uint16_t v;
  asm volatile("ld.volatile.global.u16 %0, [%1];\n" : "=h"(v) : "l"(pointer));
  return v;
}
__device__ __forceinline__ int32_t load_l2(const int32_t* pointer) {
  int32_t v;
  asm volatile("ld.volatile.global.b32 %0, [%1];\n" : "=r"(v) : "l"(pointer));
  return v;
}
__device__ __forceinline__ float load_l2(const float* pointer) {
  return __int_as_float(load_l2(reinterpret_cast<const int32_t*>(pointer)));
}
__device__ __forceinline__ float4 load_l2(const float4* pointer) {
  float4 v;
  asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(pointer));
  return v;
}

}  // namespace sparse_decode::ptx
