// Shared-memory plan of one CTA of the packed stream kernel's 64-head form;
// sizeof() is the dynamic shared memory of the launch. The producer step
// (steps/stream/produce.cuh) fills kv, scale_bits, rows_landed and
// column_mask as in the 16-head plan.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsv4_packed/stream_h64_traits.cuh"

namespace sparse_decode::dsv4_packed {

struct StreamH64Smem {
  using T = StreamH64Traits;
  alignas(16) uint8_t kv[T::kBuffers][T::kChunkColumns][T::kTileRowBytes];  // rows as copied (bulk: 16-aligned)
  alignas(16) uint32_t scale_bits[T::kBuffers][T::kScaleTiles][T::kChunkColumns];  // byte << 23; 0: masked
  uint64_t rows_landed[T::kBuffers];  // a KV tile's copies and scales (kRowsLandedArrivals)
  alignas(16) uint8_t q[T::kHeads / 8][T::kQPieces][8][16];
  alignas(16) float scores[T::kHeads][T::kScoreRowFloats];  // S (times 2^q_shift), each warpgroup its heads
  alignas(16) float probs[T::kHeads][T::kProbRowFloats];       // exp2(score - running max), FP32
  // The chunk's largest P V key (bits(P) + scale byte << 23) a (scale tile,
  // head), found by the softmax threads: P V's scale exponent of the chunk.
  uint32_t best_key[T::kScaleTiles][T::kHeads];
  float query_amax[T::kWarps][T::kHeads];  // each warp's largest |q| a head (its dim blocks)
  float score_factor[T::kHeads];           // softmax scale * log2(e) * 2^-q_shift
  float running_max[T::kHeads];            // log2 domain
  float running_sum[T::kHeads];
  float rescale[T::kHeads];                // factor on O when the running max moves
  float sink_log2[T::kHeads];
  alignas(8) uint8_t column_mask[T::kBuffers][T::kChunkColumns / 8];
};

static_assert(sizeof(StreamH64Smem) + 1024 <= 228 * 1024, "one CTA an SM");

}  // namespace sparse_decode::dsv4_packed
