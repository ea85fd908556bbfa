// q of the packed stream kernel: loaded into registers, rewritten once for
// the scores (FP16 times a power of two a head) into the Q tile.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::stream {

// The CTA's q, rewritten once for the scores and stored in the Q tile (wgmma's
// K-major core matrices): dims 0..447 as FP16 times 2^shift (shift: the
// head's largest |q| over all 512 dims lands in [2^14, 2^15), so every BF16
// value within 2^31 of it is exact, and the BF16 dims cannot overflow), each
// 16-dim block in the k order that the E4M3 bytes of an ldmatrix give (k 2t,
// 2t+1 <- dims 4t, 4t+1; k 8+2t, 9+2t <- dims 4t+2, 4t+3); dims 448..511 stay
// BF16, times 2^shift (exact). score_factor undoes the shift.
// Warp w takes 16-dim blocks 4w .. 4w + 3 of every head: lane l has head
// l % 16 and blocks 4w + 2 (l / 16) + {0, 1}, straight from global memory
// into registers, so that the 8 lanes of a store write the 8 heads of one
// core-matrix row (no bank conflicts) and the largest |q| of a head needs one
// shuffle and one exchange between the warps. Heads past `count` are zeros.
static_assert(Traits::kWarps * 4 * 16 == kHeadDim && Traits::kHeads == 16,
              "q: each warp 4 blocks of 16 dims of all 16 heads, a lane 2 blocks of one head");
struct QueryBlocks {
  uint4 bits[2][2];  // [block][8-dim piece]: BF16 as loaded
};

template <bool kGeneral>
__device__ __forceinline__ QueryBlocks load_query(const Params& p, int64_t token, int first_head, int count) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = lane % Traits::kHeads, first_block = 4 * warp + 2 * (lane / Traits::kHeads);
  QueryBlocks q;
  if (head < count) {
    const uint4* src = reinterpret_cast<const uint4*>(
        p.q + token_offset<kGeneral>(p, token, p.q_token_stride, p.q_request_stride) +
        int64_t{first_head + head} * p.q_head_stride + first_block * 16);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int piece = 0; piece < 2; ++piece) q.bits[b][piece] = src[2 * b + piece];
  } else {
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int piece = 0; piece < 2; ++piece) q.bits[b][piece] = make_uint4(0, 0, 0, 0);
  }
  return q;
}

// Block b's 16 BF16 values of q (as loaded).
__device__ __forceinline__ void unpack_block(const QueryBlocks& q, int b, uint16_t (&v)[16]) {
#pragma unroll
  for (int piece = 0; piece < 2; ++piece) {
    const uint4 bits = q.bits[b][piece];
    const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      v[8 * piece + 2 * w] = static_cast<uint16_t>(words[w] & 0xffffu);
      v[8 * piece + 2 * w + 1] = static_cast<uint16_t>(words[w] >> 16);
    }
  }
}

// The largest |q| of a lane's two blocks.
__device__ __forceinline__ float query_amax(const QueryBlocks& q) {
  float amax = 0.0f;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    uint16_t v[16];
    unpack_block(q, b, v);
#pragma unroll
    for (int d = 0; d < 16; ++d) amax = fmaxf(amax, fabsf(__uint_as_float(uint32_t{v[d]} << 16)));
  }
  return amax;
}

// The power of two that puts a head's largest |q| in [2^14, 2^15).
__device__ __forceinline__ int query_shift(float amax) {
  const int shift = amax > 0.0f ? 14 - (static_cast<int>(__float_as_uint(amax) >> 23) - 127) : 0;
  return shift > 126 ? 126 : shift;
}

// Block b (16-dim block `block` of the head) times `factor`, as the two
// 16-byte pieces of the Q tile: FP16 in the E4M3 k order, or BF16 (the
// BF16 dims).
__device__ __forceinline__ void query_block_words(const QueryBlocks& q, int b, int block, float factor,
                                                  uint32_t (&words)[2][4]) {
  uint16_t v[16];
  unpack_block(q, b, v);
  auto value = [&](int d) { return __uint_as_float(uint32_t{v[d]} << 16) * factor; };
  if (block < Traits::kFp8Blocks) {
#pragma unroll
    for (int k = 0; k < 16; k += 2) {
      const int dim = k < 8 ? 2 * k : 2 * (k - 8) + 2;  // k and k + 1 <- dims dim, dim + 1
      words[k / 8][(k % 8) / 2] = ptx::half2_bits(value(dim), value(dim + 1));
    }
  } else {
#pragma unroll
    for (int k = 0; k < 16; k += 2) words[k / 8][(k % 8) / 2] = ptx::bf16x2_bits(value(k), value(k + 1));
  }
}

__device__ __forceinline__ void convert_query(Smem& s, const QueryBlocks& q, float scale_log2) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = lane % Traits::kHeads, first_block = 4 * warp + 2 * (lane / Traits::kHeads);
  float amax = query_amax(q);
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, Traits::kHeads));
  if (lane < Traits::kHeads) s.query_amax[warp][head] = amax;
  math_sync();
#pragma unroll
  for (int w = 0; w < Traits::kWarps; ++w) amax = fmaxf(amax, s.query_amax[w][head]);
  const int shift = query_shift(amax);
  const float factor = pow2(shift);
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const int block = first_block + b;
    uint32_t words[2][4];
    query_block_words(q, b, block, factor, words);
#pragma unroll
    for (int piece = 0; piece < 2; ++piece) {
      *reinterpret_cast<uint4*>(&s.q[head / 8][2 * block + piece][head % 8][0]) =
          make_uint4(words[piece][0], words[piece][1], words[piece][2], words[piece][3]);
    }
  }
  if (threadIdx.x < Traits::kHeads) s.score_factor[head] = scale_log2 * pow2(-shift);
  ptx::fence_proxy_async_shared();  // the rewritten q is read by wgmma (async proxy)
  math_sync();
}

}  // namespace sparse_decode::dsv4_packed::stream
