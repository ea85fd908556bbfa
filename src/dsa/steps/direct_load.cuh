// The direct kernel's loads: the BF16 query, its FP16 form scaled by a
// power of two a head, and the copies of a tile's raw FP8 slots.
#pragma once

#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "common/ptx/copy.cuh"
#include "dsa/params.h"
#include "dsa/smem.cuh"
#include "dsa/steps/convert.cuh"
#include "dsa/steps/load.cuh"

namespace sparse_decode::dsa {

// Issues the copies of the row's BF16 query into the staging of tile buffer
// 1 (rows past `heads` zero-filled) as one commit group.
__device__ __forceinline__ void load_q_raw(DirectSmem& s, const DsaParams& p, int64_t row) {
  using T = TileTraits;
  for (int x = threadIdx.x; x < T::kHeads * (T::kDims / 8); x += T::kThreads) {
    const int head = x / (T::kDims / 8), piece = x % (T::kDims / 8);
    const bool exists = head < p.heads;
    const uint16_t* src = p.q + row * p.q_row_stride + (exists ? head * p.q_head_stride + piece * 8 : 0);
    ptx::cp_async_16(ptx::smem_address(&s.tiles.q.raw[head][piece * 8]), src, exists ? 16u : 0u);
  }
  ptx::cp_async_commit();
}

// The column of q's FP16 tile that holds dim r (0..15) of a 16-dim step: the
// converted K fragment of lane (g, t) carries dims 4t..4t+3 as the mma's k
// indices 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1); q takes the same order.
__device__ __forceinline__ int permuted_column(int r) { return (r & 2) * 4 + (r >> 2) * 2 + (r & 1); }

// q's BF16 staging (landed and visible) -> its FP16 staging, q * 2^shift,
// shift chosen a head so that its largest |q| lies in [2^14, 2^15): exact
// for every element within 2^28 of the largest (BF16 has 8 significant
// bits, FP16 11), the rest changes a score by less than 2^-38 of |q|max
// |k|max a dim. head_scale gets 2^-shift. 8 threads a head, 24 dims each.
// The maximum is over the finite elements, so an inf does not leave the
// head's large finite values to overflow FP16 (NaN and inf stay what they
// are); a head without a finite non-zero element keeps shift 0.
__device__ __forceinline__ void convert_q(DirectSmem& s) {
  using T = TileTraits;
  constexpr int kThreadsPerHead = T::kThreads / T::kHeads;  // 8
  constexpr int kDimsPerThread = T::kDims / kThreadsPerHead;  // 24
  static_assert(kDimsPerThread % 4 == 0, "a thread converts whole groups of 4 dims");
  const int head = threadIdx.x / kThreadsPerHead, dim0 = (threadIdx.x % kThreadsPerHead) * kDimsPerThread;
  float value[kDimsPerThread];
  float top = 0.0f;
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    value[i] = bf16_bits_to_float(s.tiles.q.raw[head][dim0 + i]);
    if (fabsf(value[i]) <= FLT_MAX) top = fmaxf(top, fabsf(value[i]));
  }
#pragma unroll
  for (int offset = 1; offset < kThreadsPerHead; offset *= 2) {
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
  }
  int exponent = 0;
  frexpf(top, &exponent);  // top < 2^exponent <= 2 top
  const int shift = top > 0.0f ? 15 - exponent : 0;
  if (dim0 == 0) s.head_scale[head] = ldexpf(1.0f, -shift);
#pragma unroll
  for (int i = 0; i < kDimsPerThread; i += 2) {
    const int dim = dim0 + i;
    const __half2 pair = __floats2half2_rn(ldexpf(value[i], shift), ldexpf(value[i + 1], shift));
    *reinterpret_cast<__half2*>(&s.tiles.q.f16[head][(dim & ~15) + permuted_column(dim & 15)]) = pair;
  }
}

// Issues the copies of the KV tile at `tile` into tile `buffer` as the
// slots are (K then V, 384 bytes a key).
__device__ __forceinline__ void issue_slots_at(DirectSmem& s, const DsaParams& p, int shift, const uint8_t* group_base,
                                               int columns, TileCursor tile, int buffer) {
  issue_tile_copies<kDsaSlotDim / 16>(s, p, shift, group_base, columns, tile, [&](int key, int piece) {
    return ptx::smem_address(&s.tiles.slots[buffer][key][piece * 16]);
  });
}

}  // namespace sparse_decode::dsa
