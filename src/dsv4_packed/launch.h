// The launch of dsv4_decode_packed's kernels (docs/kernels/packed.md).
#pragma once

#include <cstddef>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4_packed {

// Launches on `stream` the kernel choose_kernel() picks (where kAuto's
// kSplit has no workspace that fits, the choice without it); arguments must
// have passed kernels_support(), have T >= 1, and a forced kSplit a
// workspace that fits.
Status launch(const Dsv4PackedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream_st* stream);

}  // namespace sparse_decode::dsv4_packed
