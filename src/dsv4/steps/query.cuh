// What a CTA of a unit serves (its head group and, with dim parts, its
// share of the output dims), and the load of its query heads into the Q tile.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "dsv4/params.h"
#include "dsv4/smem.cuh"
#include "dsv4/steps/barriers.cuh"
#include "dsv4/steps/token_address.cuh"

namespace sparse_decode::dsv4 {

// The query heads a CTA serves: kHeads (16 or 64) from `first`, of which
// `count` exist (8 with H = 8: the other 8 rows of the MMAs see a zero query
// and are never stored).
struct HeadGroup {
  int first;
  int count;
};

template <int kHeads>
__device__ __forceinline__ HeadGroup head_group(const Dsv4Params& p, int index) {
  const int first = index * kHeads;
  return {first, p.num_heads - first < kHeads ? p.num_heads - first : kHeads};
}

// Which dims this CTA outputs: part k of a unit's kDimParts CTAs (adjacent
// CTAs) outputs dim blocks k * kOutputDimBlocks.. of every warp.
template <class Traits>
__device__ __forceinline__ int first_output_dim_block() {
  return Traits::kDimParts == 1 ? 0 : static_cast<int>(blockIdx.x % Traits::kDimParts) * Traits::kOutputDimBlocks;
}

// Copies the token's query heads into the Q tile: in each pass thread t
// copies piece t/8 (+32 per pass) of heads t%8 + 8j (j < kHeads / 8), so a
// warp fills whole core matrices; heads past the count are zero-filled
// (there are always 8). FP8: one pass, BF16: two.
template <class Traits>
__device__ __forceinline__ void load_query(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                           HeadGroup heads) {
  init_tile_barriers<Traits>(s);  // once a CTA, before its first copy
  if constexpr (Traits::kProducerWarps > 0) {
    if (threadIdx.x >= Traits::kThreads) return;  // the producers copy no query
  }
  constexpr int kPiecesPerPass = Traits::kThreads / 8;
  const int head = threadIdx.x % 8;
  const uint8_t* row = p.q + token_offset<Traits>(p, token, p.q_token_stride, p.q_request_stride) +
                       (heads.first + head) * p.q_head_stride;
#pragma unroll
  for (int pass = 0; pass < Traits::kPieces / kPiecesPerPass; ++pass) {
    const int piece = threadIdx.x / 8 + pass * kPiecesPerPass;
    const uint8_t* src = row + piece * 16;
#pragma unroll
    for (int j = 0; j < Traits::kHeads / 8; ++j) {
      const bool exists = j == 0 || head + 8 * j < heads.count;
      ptx::cp_async_16(ptx::smem_address(&s.q[j][piece][head][0]), exists ? src + 8 * j * p.q_head_stride : src,
                       exists ? 16u : 0u);
    }
  }
}

}  // namespace sparse_decode::dsv4
