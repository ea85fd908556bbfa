// Shared-memory plan of one CTA of the packed cluster kernel; sizeof() is
// the dynamic shared memory of the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsv4_packed/cluster_traits.cuh"

namespace sparse_decode::dsv4_packed {

struct ClusterSmem {
  using T = ClusterTraits;
  union {
    uint16_t kv[T::kChunkColumns][T::kTileStride];  // KV tile: dequantized rows, BF16: K and V
    float4 received[T::kReceiveSlots];  // after the last chunk: the cluster's partial O, this CTA's granules
  };
  union {
    struct {
      uint8_t fp8[T::kChunkColumns][kPackedFp8Dims];  // the rows' FP8 bytes as gathered
      uint8_t scales[T::kChunkColumns][kPackedScaleBytes];
    } raw;
    struct {  // written once every warp has dequantized its rows
      // exp2(score - max) as the sum of two BF16 values (16 significant bits)
      uint16_t hi[T::kHeads][T::kProbStride];
      uint16_t lo[T::kHeads][T::kProbStride];
    } probs;
  };
  uint16_t q[T::kHeads][T::kTileStride];
  float warp_max[T::kHeads][T::kWarps];  // each warp's score max over its 8 columns
  float warp_sum[T::kHeads][T::kWarps];  // and its sum of probabilities
  float2 received_stats[T::kMaxClusterCtas][T::kHeads];  // (max, sum) of every CTA of the cluster
  uint64_t partials_landed;  // completes once every peer's partial O and statistics for this CTA have landed
};

static_assert(sizeof(ClusterSmem::received) <= sizeof(ClusterSmem::kv), "the partial O reuses the KV tile");
static_assert(sizeof(ClusterSmem) <= 113 * 1024, "two CTAs an SM");

}  // namespace sparse_decode::dsv4_packed
