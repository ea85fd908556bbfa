// Diagnostics inside the kernels, compiled only with the CMake option
// SPARSE_DECODE_DIAGNOSTICS (off by default; diagnostics/README.md): clock
// marks at the steps of a chunk (the phase clocks) and stage skips. In a
// release build every function here is empty or false, and the kernels
// carry no branch of theirs.
#pragma once

#include <cstddef>
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

// Phase clocks: clock64() at the steps of each chunk of CTA 0, for the first
// thread of each warpgroup, so that the latency chain of a chunk can be read
// step by step (diagnostics/phase_clocks.cpp), and %globaltimer at each span
// mark of every CTA.
namespace phase_clocks {

inline constexpr int kChunks = 16;   // chunks recorded
inline constexpr int kMarks = 8;     // steps a chunk (the walks of src/dsv4/steps)
inline constexpr int kWarpgroups = 2;
// Row kChunks holds a CTA's span marks (phase_span): 0 entry, 1 walk start,
// then the kernel's own (stream: 2 query landed, 3 walk end, 4 results
// stored; split: 2 walk end, 2 and 3 frame each group's write; cluster: 2
// walk end, 3 cluster wait, 4 sent, 5 received, 6 stored).
inline constexpr int kSpanRow = kChunks;
inline constexpr size_t kCount = size_t{kWarpgroups} * (kChunks + 1) * kMarks;
// %globaltimer (ns, comparable across SMs) at each span mark, thread 0 of the first kStampCtas CTAs.
inline constexpr int kStampCtas = 1024;
inline constexpr size_t kStampCount = size_t{kStampCtas} * kMarks;
// The last stamp slot of a CTA holds its SM (%smid) instead: no kernel has 8 span marks.
inline constexpr int kSmSlot = kMarks - 1;
// The split path's combine kernel stamps rows kCombineRow + its CTA (0 entry,
// 1 past its dependency wait, 2 folded and stored): read them only when the
// split kernel had at most kCombineRow CTAs (its stamps take the rows below).
inline constexpr int kCombineRow = kStampCtas / 2;

// Copy the clocks [warpgroup][chunk][mark] of the last launch of the FP8
// 16-head stream, split or cluster kernel to `host` (kCount values); return
// a cudaError_t. Defined only with the option.
int read_stream(unsigned long long* host);
int read_stream_deep(unsigned long long* host);  // the deep stream kernel (at most one unit an SM)
// The deep stream kernel with P V warps: row 0 the scoring warps (marks 0
// chunk start, 1 rows landed, 3 scores, 4 barrier, 5 slot free, 6 softmax,
// 7 handed over), row 1 the P V warps (0 start, 1 rows landed, 2 handed
// over, 7 P V and fold done; 3-6 = 2).
int read_stream_pv_warps(unsigned long long* host);
int read_split(unsigned long long* host);
int read_cluster(unsigned long long* host);
// The span marks' %globaltimer stamps [cta][mark] (kStampCount values) of the
// kernel that read_* named last; unset marks are 0.
int read_split_stamps(unsigned long long* host);
int read_cluster_stamps(unsigned long long* host);
int read_stream_stamps(unsigned long long* host);
int read_stream_deep_stamps(unsigned long long* host);
int read_stream_pv_warps_stamps(unsigned long long* host);
// The packed stream kernel's instances (split path, one CTA a unit, pair):
// span marks 0 entry, 1 math warps' start, 2 q converted, 3 first rows
// landed, 4 walk end, 5 results stored or written.
int read_packed_stream(unsigned long long* host);
int read_packed_stream_stamps(unsigned long long* host);

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
