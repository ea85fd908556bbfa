// Issue rate of the E4M3 -> FP16 conversions the P V step can use, alone
// and mixed, in warp instructions an SM a cycle (every SM full: 32 warps).
//   convert-rate-probe
// Modes: the hardware conversion (cvt.rn.f16x2.e4m3x2, F2FP), the integer
// form (sign-replicating byte permute, shift, mask: the value times 2^-8),
// plain LOP3 and IMAD chains as pipe references, and the two conversions
// interleaved. See docs/kernels/large_batch.md, "Eleventh session".
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "common/ptx/convert.cuh"

namespace {

namespace ptx = sparse_decode::ptx;

constexpr int kChains = 8;
constexpr int kIterations = 4096;

// Bytes 0 and 2 of r as FP16 times 2^-8: each byte with its sign replicated
// above it, then shifted so that the sign lands on bit 15 and the 7 value
// bits on bits 7..13 (exponent bias 7 read as 15).
__device__ __forceinline__ uint32_t integer_even(uint32_t r) {
  uint32_t q;
  asm("prmt.b32 %0, %1, 0, 0xA282;\n" : "=r"(q) : "r"(r));
  return (q << 7) & 0xBF80BF80u;
}
__device__ __forceinline__ uint32_t integer_odd(uint32_t r) {
  uint32_t q;
  asm("prmt.b32 %0, %1, 0, 0xB391;\n" : "=r"(q) : "r"(r));
  return (q << 7) & 0xBF80BF80u;
}

template <int kMode>
__global__ void __launch_bounds__(256) rate_kernel(uint32_t* out, long long* cycles, uint32_t seed) {
  uint32_t v[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) v[i] = seed * (threadIdx.x + 1) + 0x9E3779B9u * i;
  __syncthreads();
  const long long start = clock64();
  for (int it = 0; it < kIterations; ++it) {
#pragma unroll
    for (int i = 0; i < kChains; ++i) {
      if constexpr (kMode == 0) v[i] = ptx::e4m3x2_to_f16x2<false>(v[i]);  // 1 F2FP
      if constexpr (kMode == 1) v[i] = integer_even(v[i]);             // PRMT, shift, LOP3
      if constexpr (kMode == 2) {                                      // 1 LOP3
        asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(v[i]) : "r"(seed), "r"(v[(i + 1) % kChains]));
      }
      if constexpr (kMode == 3) v[i] = v[i] * 0x01000193u + seed;      // 1 IMAD
      if constexpr (kMode == 4) v[i] = (i & 1) ? integer_odd(v[i]) : ptx::e4m3x2_to_f16x2<true>(v[i]);
      if constexpr (kMode == 5) v[i] = (i % 4 == 3) ? integer_odd(v[i]) : ptx::e4m3x2_to_f16x2<true>(v[i]);
    }
  }
  __syncthreads();
  const long long stop = clock64();
  uint32_t sum = 0;
#pragma unroll
  for (int i = 0; i < kChains; ++i) sum ^= v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}

template <int kMode>
void measure(const char* name, int sms, uint32_t* out, long long* cycles, long long* host_cycles) {
  const int blocks = sms * 4;  // 32 warps an SM, all resident
  rate_kernel<kMode><<<blocks, 256>>>(out, cycles, 12345u);
  rate_kernel<kMode><<<blocks, 256>>>(out, cycles, 777u);
  cudaMemcpy(host_cycles, cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
  long long worst = 0;
  for (int b = 0; b < blocks; ++b) worst = host_cycles[b] > worst ? host_cycles[b] : worst;
  const double chain_steps = 4.0 * 8 * kIterations * kChains;  // warp-level chain steps an SM
  std::printf("%-34s %8.3f chain steps an SM a cycle (%lld cycles)\n", name, chain_steps / worst, worst);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint32_t* out = nullptr;
  long long* cycles = nullptr;
  cudaMalloc(&out, sms * 4 * 256 * sizeof(uint32_t));
  cudaMalloc(&cycles, sms * 4 * sizeof(long long));
  static long long host_cycles[4096];
  measure<0>("F2FP (cvt e4m3x2 -> f16x2)", sms, out, cycles, host_cycles);
  measure<1>("integer form (PRMT, SHF, LOP3)", sms, out, cycles, host_cycles);
  measure<2>("LOP3", sms, out, cycles, host_cycles);
  measure<3>("IMAD", sms, out, cycles, host_cycles);
  measure<4>("half F2FP, half integer", sms, out, cycles, host_cycles);
  measure<5>("3/4 F2FP, 1/4 integer", sms, out, cycles, host_cycles);
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("%s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
