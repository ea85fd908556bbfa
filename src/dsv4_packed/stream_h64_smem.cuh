// Shared-memory plan of one CTA of the packed stream kernel's 64-head form;
// sizeof() is the dynamic shared memory of the launch. The producer step
// (steps/stream/produce.cuh) fills kv, scale_bits, rows_landed and
// column_mask as in the 16-head plan; the math warps dequantize kv into keys.
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
  alignas(128) uint8_t q[T::kHeads / 8][T::kPieces][8][16];  // BF16, as given
  // The chunk's rows, BF16 times 2^(127 - key byte) (steps/stream_h64/dequant.cuh): K of S and V of P V.
  alignas(128) uint8_t keys[T::kChunkColumns / 8][T::kPieces][8][16];
  float probs[T::kHeads][T::kProbRowFloats];  // exp2(score - running max), FP32: warpgroup 0 -> 1
  uint32_t key_bits[T::kChunkColumns];  // a row's key byte << 23
  uint64_t key_mask;                    // the chunk's active rows, bit r for row r
  float rescale[T::kHeads];             // factor on O when the running max moves: warpgroup 0 -> 1
  int exponent[T::kHeads];              // O's scale exponent a head after this chunk: warpgroup 0 -> 1
  float running_max[T::kHeads];         // log2 domain, after the walk
  float running_sum[T::kHeads];
  float sink_log2[T::kHeads];
  alignas(8) uint8_t column_mask[T::kBuffers][T::kChunkColumns / 8];
};

static_assert(sizeof(StreamH64Smem) + 1024 <= 228 * 1024, "one CTA an SM");
static_assert(offsetof(StreamH64Smem, keys) + sizeof(StreamH64Smem::keys) <= 256 * 1024,
              "wgmma descriptors address the Q and key tiles below 256 KiB");

}  // namespace sparse_decode::dsv4_packed
