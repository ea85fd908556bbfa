// Host side of the small-batch cluster kernel (docs/kernels/small_batch.md).
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode.h"

namespace sparse_decode::dsv4 {

// How a token's columns are spread over the CTAs of its cluster.
struct SmallBatchPlan {
  int32_t cluster_ctas = 0;    // CTAs a token (cluster size), <= 16
  int32_t chunks_per_cta = 0;  // 64-column chunks each CTA walks through
};
SmallBatchPlan small_batch_plan(int32_t width);

// Why the kernel cannot serve these (validated) arguments; Ok when it can.
Status small_batch_supports(const Dsv4DecodeArgs& args);

// Tokens whose clusters are all resident at once on the current device.
int64_t small_batch_max_tokens(int32_t width);

// Launches on `stream`; arguments must have passed small_batch_supports().
Status launch_small_batch(const Dsv4DecodeArgs& args, CUstream_st* stream);

}  // namespace sparse_decode::dsv4
