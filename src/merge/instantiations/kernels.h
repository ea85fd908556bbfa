// The kernel registry of merge_states: the instantiation file defines the
// getter (the launcher takes kernels by address, so that only one
// translation unit compiles each instance).
#pragma once

#include "sparse_decode/merge_states.h"

namespace sparse_decode::merge {

// The merge kernel for BF16 or float32 partials and output, at the rank
// batch MergeTraits::bound gives `ranks` (merge.cu).
const void* merge_kernel_for(MergeDType partial_dtype, MergeDType out_dtype, int ranks);

}  // namespace sparse_decode::merge
