// Host side of the diagnostics (CMake option SPARSE_DECODE_DIAGNOSTICS, off
// by default): which stages a measurement run leaves out and which stream
// kernel it forces, read once from the environment in a diagnostic build
// (diagnostics/environment.cpp); a release build reads nothing and these
// are constants. Also the phase clocks' layout, for the tool that reads them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparse_decode::instrument {

// Stage-skip bits (SPARSE_DECODE_SKIP_STAGES). The outputs of such a run are wrong.
inline constexpr int32_t kSkipRowLoads = 1;        // no row copies: masked rows, math on zeros
inline constexpr int32_t kSkipExchange = 2;        // the cluster kernel folds its own group only
inline constexpr int32_t kSkipMath = 4;            // stop after the gather
inline constexpr int32_t kSkipAll = 8;             // every dsv4 kernel returns at once
inline constexpr int32_t kSkipCombine = 16;        // the combine kernel returns at once
inline constexpr int32_t kSkipFold = 32;           // the cluster kernel stops once its peers' bytes landed
inline constexpr int32_t kSkipCombineLaunch = 64;  // the split path launches no combine kernel
inline constexpr int32_t kSkipScopeLoads = 128;    // the page walk's scope loads nothing: every column active
inline constexpr int32_t kSkipScopeBounds = 256;   // the page walk's scope loads lens only (no hca_seq_lens, swa_lens)

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int32_t skip_stages();  // SPARSE_DECODE_SKIP_STAGES
int32_t deep_kernel();  // SPARSE_DECODE_DEEP: 1 the deep stream kernel without P V warps, 2 with them
#else
constexpr int32_t skip_stages() { return 0; }
constexpr int32_t deep_kernel() { return 0; }
#endif

// Gives a launch's parameters the stage-skip bits (a diagnostic build's
// Params has the field; a release build's does not).
template <class Params>
void set_skip_stages(Params& p) {
#if defined(SPARSE_DECODE_DIAGNOSTICS)
  p.skip_stages = skip_stages();
#else
  (void)p;
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
// The page-walk form's stream kernels (dsv4_decode_hca): the same marks as
// the plain and general forms' (read_stream, read_stream_deep, read_stream_pv_warps).
int read_page_walk_stream(unsigned long long* host);
int read_page_walk_stream_deep(unsigned long long* host);
int read_page_walk_stream_pv_warps(unsigned long long* host);
int read_page_walk_stream_stamps(unsigned long long* host);
int read_page_walk_stream_deep_stamps(unsigned long long* host);
int read_page_walk_stream_pv_warps_stamps(unsigned long long* host);
// The packed stream kernel's instances (split path, one CTA a unit, pair):
// span marks 0 entry, 1 math warps' start, 2 q converted, 3 first rows
// landed, 4 walk end, 5 results stored or written.
int read_packed_stream(unsigned long long* host);
int read_packed_stream_stamps(unsigned long long* host);
// The packed stream kernel's 64-head form: the same span marks, and chunk
// marks [warpgroup][chunk][mark] as the 16-head walks' (0 chunk start, 1
// rows landed, 2 = 1, 3 scores, 4 barrier, 5 softmax, 6 barrier, 7 P V).
int read_packed_stream_h64(unsigned long long* host);
int read_packed_stream_h64_stamps(unsigned long long* host);

}  // namespace phase_clocks
}  // namespace sparse_decode::instrument
