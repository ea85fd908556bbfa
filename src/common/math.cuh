// The constants of the kernels' softmax, the sink's scaling, the one
// approximate function, and the division of the request views
// (FastDivisor): every kernel and launcher takes them from here.
#pragma once

#include <cstdint>

namespace sparse_decode {

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e): scores move to the log2 domain
inline constexpr float kLn2 = 0.6931471805599453f;    // ln(2): lse leaves it

// Division by a divisor fixed for a launch (d >= 1) of numerators below
// 2^31, as a multiply and a shift: n / d = (n * multiplier) >> shift with
// shift = 31 + ceil(log2 d) and multiplier = ceil(2^shift / d) < 2^32 (the
// rounding error of the multiplier, below d, times n stays below 2^shift).
struct FastDivisor {
  uint32_t divisor;
  uint32_t multiplier;
  uint32_t shift;
};

inline FastDivisor fast_divisor(uint32_t d) {
  uint32_t bits = 0;
  while ((uint64_t{1} << bits) < d) ++bits;
  const uint32_t shift = 31 + bits;
  return {d, static_cast<uint32_t>(((uint64_t{1} << shift) + d - 1) / d), shift};
}

#if defined(__CUDACC__)
// sink * log2(e) where a kernel needs it, for a sink loaded at the kernel's
// start, off every chain. A plain multiply is free to move up to the load,
// where the thread then waits a DRAM trip, before the CTA's first barrier,
// and every warp with it. asm volatile keeps the multiply where the kernel
// has it (the SASS shows it after the barrier); mul.rn is the same operation.
__device__ __forceinline__ float sink_log2(float sink) {
  float scaled;
  asm volatile("mul.rn.f32 %0, %1, %2;" : "=f"(scaled) : "f"(sink), "f"(kLog2e));
  return scaled;
}

__device__ __forceinline__ uint32_t divide(const FastDivisor& f, uint32_t n) {
  return static_cast<uint32_t>((uint64_t{n} * f.multiplier) >> f.shift);
}

// Token `token`'s offset in a [B, q_len] request view (request_tokens: q_len;
// tokens below 2^31): (t / q_len) * request_stride + (t % q_len) * token_stride.
__device__ __forceinline__ int64_t request_view_offset(const FastDivisor& request_tokens, int64_t token,
                                                       int64_t token_stride, int64_t request_stride) {
  const uint32_t t = static_cast<uint32_t>(token);
  const uint32_t request = divide(request_tokens, t);
  const uint32_t index = t - request * request_tokens.divisor;
  return int64_t{request} * request_stride + int64_t{index} * token_stride;
}
#endif

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
