// The constants and the one approximate function of the kernels' softmax:
// every kernel and launcher takes them from here.
#pragma once

namespace sparse_decode {

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e): scores move to the log2 domain
inline constexpr float kLn2 = 0.6931471805599453f;    // ln(2): lse leaves it

namespace ptx {

#if defined(__CUDACC__)
// 2^x, approximate (ex2.approx.ftz): the softmax's exponent in every kernel.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif

}  // namespace ptx
}  // namespace sparse_decode
