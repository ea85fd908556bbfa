// q of the packed stream kernel's 64-head form: the 16-head kernel's loads
// (steps/stream/query.cuh) for four groups of 16 heads, stored as they are
// (BF16, exact) into the Q tile in the key tile's dim order.
#pragma once

#include <cstdint>

#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/query.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"

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

// The Q tile: q as loaded (BF16, the key tile's type), each lane's two
// blocks of its four heads.
__device__ __forceinline__ void store_query(Smem& s, const QueryGroups& q) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_block = 4 * warp + 2 * (lane / 16);
#pragma unroll
  for (int r = 0; r < kQueryGroups; ++r) {
    const int head = 16 * r + lane % 16;
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int piece = 0; piece < 2; ++piece) {
        uint8_t* dst = &s.q[head / 8][2 * (first_block + b) + piece][head % 8][0];
        *reinterpret_cast<uint4*>(dst) = q.group[r].bits[b][piece];
      }
  }
  ptx::fence_proxy_async_shared();  // the Q tile is read by wgmma (async proxy)
  math_sync();
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
