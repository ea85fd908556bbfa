// Shared-memory plan of one CTA of the packed stream kernel; sizeof() is
// the dynamic shared memory of the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsv4_packed/stream_traits.cuh"

namespace sparse_decode::dsv4_packed {

struct StreamSmem {
  using T = StreamTraits;
  union {
    alignas(16) uint8_t kv[T::kBuffers][T::kChunkColumns][T::kTileRowBytes];  // rows as copied (bulk: 16-aligned)
    struct {  // after the walk, two CTAs a unit: what the peer sends of the heads this CTA stores
      float values[T::kThreads][16];  // a thread's P V values of one head (its 64 dims' share)
      int scale_exponent[T::kThreads];  // a thread's scale exponent of that head
      float2 stats[T::kHeads];        // (running max, running sum) of every head
    } exchange;
  };
  uint32_t scale_bits[T::kBuffers][T::kScaleTiles][T::kChunkColumns];        // scale byte << 23; 0 for masked rows
  uint64_t rows_landed[T::kBuffers];  // a KV tile's copies and scales (kRowsLandedArrivals)
  uint64_t exchange_landed;           // two CTAs a unit: the peer's share has landed in `exchange`
  alignas(16) uint8_t q[T::kHeads / 8][T::kQPieces][8][16];
  float scores[2][T::kHeads][T::kScoreRowFloats];  // each warpgroup's share of S (scaled by 2^q_shift)
  float probs[T::kHeads][T::kProbRowFloats];       // exp2(score - running max), FP32
  float query_amax[T::kWarps][T::kHeads];          // each warp's largest |q| a head (its dim blocks)
  float score_factor[T::kHeads];                   // softmax scale * log2(e) * 2^-q_shift
  float running_max[T::kHeads];                    // log2 domain
  float running_sum[T::kHeads];
  float rescale[T::kHeads];                        // factor on O when the running max moves
  float sink_log2[T::kHeads];
  alignas(8) uint8_t column_mask[T::kBuffers][T::kChunkColumns / 8];
};

// What the peer of a pair sends: every thread's values and scale exponent, and the statistics.
inline constexpr uint32_t kPairExchangeBytes = StreamTraits::kThreads * (16 * sizeof(float) + sizeof(int)) +
                                               StreamTraits::kHeads * sizeof(float2);
static_assert(kPairExchangeBytes == sizeof(StreamSmem::exchange),
              "the pair's expected bytes are the whole exchange area, each byte sent once");

static_assert(sizeof(StreamSmem) + 1024 <= 228 * 1024 / StreamTraits::kCtasPerSm, "two CTAs an SM");

}  // namespace sparse_decode::dsv4_packed
