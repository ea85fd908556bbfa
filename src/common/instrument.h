// Host side of the diagnostics (CMake option SPARSE_DECODE_DIAGNOSTICS, off
// by default): which stages a measurement run leaves out and which stream
// kernel it forces, read once from the environment in a diagnostic build
// (diagnostics/environment.cpp); a release build reads nothing and these
// are constants.
#pragma once

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

}  // namespace sparse_decode::instrument
