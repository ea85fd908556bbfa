// S = Q K^T of the packed stream kernel's 64-head form: the 16-head step
// (steps/stream/score.cuh) with the 64 heads as wgmma N in one pass: each
// score tile's E4M3 bytes are converted once (16 conversions a tile a lane)
// and its 4 k-steps run as m64n64k16, its accumulator scaled into the total
// while the next tile's bytes load.
#pragma once

#include "dsv4_packed/steps/stream/score.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// Warpgroup g's share of S^T (64 columns x 64 heads) over score tiles 4g ..
// 4g + 3 (tile 7: the BF16 dims), stored as scores[warpgroup][head][column].
__device__ __forceinline__ void score_chunk(Smem& s, int buffer) { stream::score_heads<Traits>(s, buffer); }

}  // namespace sparse_decode::dsv4_packed::stream_h64
