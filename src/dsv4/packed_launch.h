// Host side of the packed-row kernel (docs/kernels/packed.md).
#pragma once

#include <cstdint>

#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::dsv4 {

// How a token's 64-column chunks (SWA ones, then extra ones) are spread
// over the CTAs of its cluster.
struct PackedPlan {
  int32_t chunks = 0;          // ceil(W_swa / 64) + ceil(W_extra / 64)
  int32_t cluster_ctas = 0;    // CTAs a (token, head group), <= 16
  int32_t chunks_per_cta = 0;  // chunks each CTA walks through
};
PackedPlan packed_plan(int32_t swa_width, int32_t extra_width);

// Why the kernel cannot serve these (validated, device-memory) arguments;
// Ok when it can.
Status packed_supports(const Dsv4PackedDecodeArgs& args);

// Launches on `stream`; arguments must have passed packed_supports() and have T >= 1.
Status launch_packed(const Dsv4PackedDecodeArgs& args, CUstream_st* stream);

}  // namespace sparse_decode::dsv4
