// The output of the packed stream kernel's 64-head form: each warpgroup
// normalizes its dims of its fragment's heads by the head's softmax sum and
// sink, times 2^(scale exponent), into BF16 rows in shared memory, then
// stores them a head's 512 bytes a warp with 16-byte stores; the lse by
// warpgroup 0.
#pragma once

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/steps/stream/output.cuh"
#include "dsv4_packed/steps/stream_h64/common.cuh"
#include "dsv4_packed/steps/token_address.cuh"

namespace sparse_decode::dsv4_packed::stream_h64 {

// A staged row: a warpgroup's 256 BF16 dims of a head, 16 bytes of padding
// so that a fragment's 8 rows fall on distinct banks.
inline constexpr int kStageRowBytes = Traits::kHalfDims * 2 + 16;
inline constexpr int kStageChunks = Traits::kHalfDims * 2 / 16;  // 16-byte pieces of a row: a warp's stores
static_assert(Traits::kHeads * kStageRowBytes <= sizeof(Smem::q) &&
                  Traits::kHeads * kStageRowBytes <= sizeof(Smem::keys),
              "warpgroup 0 stages in the Q tile, warpgroup 1 in the key tile");
static_assert(kStageChunks == 32, "a warp stores one head's row");

// Free once the walk has ended (both warpgroups' wgmmas waited for, then
// walk_sync): warpgroup 0's S no longer reads the Q tile, P V the key tile.
__device__ __forceinline__ uint8_t* output_stage(Smem& s, int warpgroup) {
  return warpgroup == 0 ? &s.q[0][0][0][0] : &s.keys[0][0][0][0];
}

// Dims first_dim .. first_dim + 2 kValues - 1 of the thread's two heads
// (o: an m64nN fragment), `exponent` theirs (kNoExponent: nothing walked);
// the lse where write_lse.
template <bool kGeneral, int kValues>
__device__ __forceinline__ void store_dims(Smem& s, const Params& p, int64_t token, int first_head, int count,
                                           const float (&o)[kValues], int first_dim, const int (&exponent)[2],
                                           bool write_lse) {
  static_assert(kValues * 2 == Traits::kHalfDims, "a warpgroup's 256 dims, 2 heads a thread");
  const int warpgroup = first_dim / Traits::kHalfDims;
  uint8_t* stage = output_stage(s, warpgroup);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = fragment_row(h);
    if (head >= count) continue;
    float* lse = write_lse && p.lse && threadIdx.x % 4 == 0
                     ? p.lse + token_offset<kGeneral>(p, token, p.lse_token_stride, p.lse_request_stride) +
                           first_head + head
                     : nullptr;
    const float* lse_sink = p.lse_with_sink && p.sinks ? p.sinks + first_head + head : nullptr;
    const float scale = stream::head_output_scale<kGeneral>(HeadStats{s.running_max[head], s.running_sum[head]},
                                                            s.sink_log2[head], lse, lse_sink);
    float scale_a = 1.0f, scale_b = 1.0f;
    if (exponent[h] != kNoExponent) {
      const int e = stream::output_exponent(exponent[h]);
      scale_a = pow2(e / 2), scale_b = pow2(e - e / 2);
    }
    uint8_t* row = stage + head * kStageRowBytes + 4 * (threadIdx.x % 4);
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
      const float x = o[4 * j + 2 * h] * scale * scale_a * scale_b;
      const float y = o[4 * j + 2 * h + 1] * scale * scale_a * scale_b;
      *reinterpret_cast<uint32_t*>(row + 16 * j) = ptx::bf16x2_bits(x, y);
    }
  }
  ptx::named_barrier_sync(Traits::kOutputBarrier + warpgroup, Traits::kWarpgroupThreads);
  uint16_t* out_token = p.out + token_offset<kGeneral>(p, token, p.out_token_stride, p.out_request_stride) +
                        first_head * p.out_head_stride + first_dim;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  for (int head = warp; head < count; head += 4) {
    const uint4 piece = *reinterpret_cast<const uint4*>(stage + head * kStageRowBytes + 16 * lane);
    *reinterpret_cast<uint4*>(out_token + head * p.out_head_stride + 8 * lane) = piece;
  }
}

}  // namespace sparse_decode::dsv4_packed::stream_h64
