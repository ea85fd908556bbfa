// What the library decides for a call, for tests, benchmarks and engines
// that size their batches: separate from the decode API, which does not
// need them.
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode {

// The most tokens for which the cluster kernel runs in one wave on the
// current device (0 without a device).
int64_t dsv4_small_batch_max_tokens(const Dsv4DecodeArgs& args);

// The kernel that dsv4_decode runs for these (device) arguments, given a
// workspace of workspace_size(args) bytes.
Dsv4Kernel dsv4_chosen_kernel(const Dsv4DecodeArgs& args);

}  // namespace sparse_decode
