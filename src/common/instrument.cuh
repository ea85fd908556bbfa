// Diagnostics inside the kernels, compiled only with the CMake option
// SPARSE_DECODE_DIAGNOSTICS (off by default; diagnostics/README.md): clock
// marks at the steps of a chunk (the phase clocks) and stage skips. In a
// release build every function here is empty or false, and the kernels
// carry no branch of theirs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/instrument.h"

namespace sparse_decode::instrument {

// Whether the launch of `p` leaves out `stages` (kSkip* bits): never in a
// release build, where Params has no skip_stages.
template <class Params>
__host__ __device__ __forceinline__ bool skips(const Params& p, int32_t stages) {
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  return (p.skip_stages & stages) != 0;
#else
  return (void)p, (void)stages, false;
#endif
}

namespace phase_clocks {

#if defined(SPARSE_DECODE_DIAGNOSTICS)
// One copy a translation unit: read() reads the copy of the kernel's file.
static __device__ unsigned long long g_clocks[kWarpgroups][kChunks + 1][kMarks];
static __device__ unsigned long long g_stamps[kStampCtas][kMarks];
// This translation unit's copies, for its read_* functions.
static inline int copy_clocks(unsigned long long* host) { return cudaMemcpyFromSymbol(host, g_clocks, sizeof(g_clocks)); }
static inline int copy_stamps(unsigned long long* host) { return cudaMemcpyFromSymbol(host, g_stamps, sizeof(g_stamps)); }
#endif

}  // namespace phase_clocks

__device__ __forceinline__ void phase_mark(int chunk, int mark) {
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  if (blockIdx.x == 0 && threadIdx.x % 128 == 0 && threadIdx.x / 128 < phase_clocks::kWarpgroups &&
      chunk < phase_clocks::kChunks) {
    phase_clocks::g_clocks[threadIdx.x / 128][chunk][mark] = clock64();
  }
#else
  (void)chunk, (void)mark;
#endif
}
// CTA 0's clock at `mark` of `chunk` in clock row `row`, by the calling thread (the caller picks one).
__device__ __forceinline__ void phase_mark_in(int row, int chunk, int mark) {
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  if (blockIdx.x == 0 && chunk < phase_clocks::kChunks) phase_clocks::g_clocks[row][chunk][mark] = clock64();
#else
  (void)row, (void)chunk, (void)mark;
#endif
}
// %globaltimer at `mark` in stamp row `row`, by thread `thread` (0: the combine kernel's marks).
__device__ __forceinline__ void phase_stamp(int64_t row, int mark, unsigned thread = 0) {
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  if (threadIdx.x == thread && row >= 0 && row < phase_clocks::kStampCtas) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    phase_clocks::g_stamps[row][mark] = now;
  }
#else
  (void)row, (void)mark, (void)thread;
#endif
}
// A mark of CTA 0's span (phase_clocks::kSpanRow), by the first thread of each
// of the two warpgroups from thread `first` (the math warps; the P V warps of
// a kernel that has them, for the marks only they reach); and every CTA's
// %globaltimer at the mark, by thread `first`.
__device__ __forceinline__ void phase_span(int mark, unsigned first = 0) {
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  phase_stamp(blockIdx.x, mark, first);
  const unsigned thread = threadIdx.x - first;  // wraps for threads before `first`: none of them records
  if (mark == 0 && threadIdx.x == 0 && blockIdx.x < phase_clocks::kStampCtas) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    phase_clocks::g_stamps[blockIdx.x][phase_clocks::kSmSlot] = sm;
  }
  if (blockIdx.x == 0 && thread % 128 == 0 && thread / 128 < phase_clocks::kWarpgroups) {
    phase_clocks::g_clocks[thread / 128][phase_clocks::kSpanRow][mark] = clock64();
  }
#else
  (void)mark, (void)first;
#endif
}

}  // namespace sparse_decode::instrument
