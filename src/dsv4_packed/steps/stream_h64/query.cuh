// q of the packed stream kernel's 64-head form: the 16-head kernel's
// rewrite (steps/stream/query.cuh) for four groups of 16 heads: FP16 times
// a power of two a head, in the k order of the E4M3 bytes, into the Q tile.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/query.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

inline constexpr int kQueryGroups = Traits::kHeads / 16;

// Lane l of warp w holds head 16 r + l % 16 of group r, 16-dim blocks
// 4w + 2 (l / 16) + {0, 1}, as loaded (heads past `count` are zeros).
struct QueryGroups {
  stream::QueryBlocks group[kQueryGroups];
};

template <bool kGeneral>
__device__ __forceinline__ QueryGroups load_query(const Params& p, int64_t token, int first_head, int count) {
  QueryGroups q;
#pragma unroll
  for (int r = 0; r < kQueryGroups; ++r) {
    q.group[r] = stream::load_query<kGeneral>(p, token, first_head + 16 * r, count - 16 * r);
  }
  return q;
}

// The Q tile: each head's shift from its largest |q| over all 512 dims
// (the 16-head rule), its dims converted as the 16-head kernel converts them.
__device__ __forceinline__ void convert_query(Smem& s, const QueryGroups& q, float scale_log2) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_block = 4 * warp + 2 * (lane / 16);
  float amax[kQueryGroups];
#pragma unroll
  for (int r = 0; r < kQueryGroups; ++r) {
    amax[r] = stream::query_amax(q.group[r]);
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 16));
    if (lane < 16) s.query_amax[warp][16 * r + lane] = amax[r];
  }
  math_sync();
#pragma unroll
  for (int r = 0; r < kQueryGroups; ++r) {
    const int head = 16 * r + lane % 16;
#pragma unroll
    for (int w = 0; w < Traits::kWarps; ++w) amax[r] = fmaxf(amax[r], s.query_amax[w][head]);
    const int shift = stream::query_shift(amax[r]);
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      uint32_t words[2][4];
      stream::query_block_words(q.group[r], b, first_block + b, pow2(shift), words);
#pragma unroll
      for (int piece = 0; piece < 2; ++piece) {
        *reinterpret_cast<uint4*>(&s.q[head / 8][2 * (first_block + b) + piece][head % 8][0]) =
            make_uint4(words[piece][0], words[piece][1], words[piece][2], words[piece][3]);
      }
    }
    if (warp == 0 && lane < 16) s.score_factor[head] = scale_log2 * pow2(-shift);
  }
  ptx::fence_proxy_async_shared();  // the rewritten q is read by wgmma (async proxy)
  math_sync();
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
