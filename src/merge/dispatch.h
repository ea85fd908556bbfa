// Host side of the merge kernel: its parameters, the support check and the launch.
#pragma once

#include "merge/params.h"
#include "sparse_decode/merge_states.h"

namespace sparse_decode::merge {

// The kernel's parameters for a validated call: rank pointers resolved.
MergeParams make_params(const MergeStatesArgs& args);

// Whether this build's kernel serves a validated device-memory call with
// T > 0 (an sm_90 device; T * H * D / 8 vectors below 2^31).
Status kernels_support(const MergeStatesArgs& args);

// Launches the merge kernel for a validated device-memory call with T > 0
// that kernels_support() accepts.
Status launch(const MergeStatesArgs& args, CUstream_st* stream);

}  // namespace sparse_decode::merge
