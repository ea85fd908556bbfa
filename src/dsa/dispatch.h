// Host side of the dsa_decode kernels: the plan (the splits the kernels
// run and the kernel parameters), the support check, and the launch.
#pragma once

#include <cstdint>

#include "dsa/params.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::dsa {

// The splits the kernels run for a validated call: split s takes region
// columns s, s + splits, ... (docs/formats/dsa_layout.md, decision 4), so
// splits past the R columns read nothing and weigh 0 in the combine (their
// partials are zeros). Running min(splits, R) of them, but at least
// kMinCombinedSplits so that the same combine runs, gives the same
// partition and the same bits without the empty CTAs. One split runs alone
// (no workspace, no combine).
inline constexpr int32_t kMinCombinedSplits = 2;
int32_t launched_splits(const DsaDecodeArgs& args);

// Whether the direct kernel serves a validated device-memory call: an FP8
// cache with kAuto or kDirect.
bool uses_direct_kernel(const DsaDecodeArgs& args);

// The kernels' parameters for a validated call, with `workspace` split into
// the partial outputs and the log-sum-exps of launched_splits(args) splits.
DsaParams make_params(const DsaDecodeArgs& args, void* workspace);

// Whether this build's kernels serve a validated device-memory call (an
// sm_90 device; a grid of num_rows * splits CTAs).
Status kernels_support(const DsaDecodeArgs& args);

// Launches the split kernel (and, with more than one launched split, the
// combine kernel) for a validated device-memory call with rows > 0 that
// kernels_support() accepts.
Status launch(const DsaDecodeArgs& args, void* workspace, CUstream_st* stream);

}  // namespace sparse_decode::dsa
