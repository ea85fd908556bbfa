// The merge kernel of merge_states (docs/kernels/merge.md): one thread a
// vector (8 dims of one token and head), every rank's vector folded in
// rank order with weights from the ranks' lse.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/ptx/convert.cuh"
#include "common/ptx/sync.cuh"
#include "merge/params.h"
#include "merge/traits.cuh"

namespace sparse_decode::merge {

// One vector as loaded: 16 bytes of BF16 or two 16-byte float32 halves.
template <MergeDType kDType>
struct RawVector {
  uint4 bits;
};
template <>
struct RawVector<MergeDType::kFloat32> {
  float4 low, high;
};

template <MergeDType kDType>
__device__ __forceinline__ constexpr int64_t element_bytes() {
  return kDType == MergeDType::kFloat32 ? 4 : 2;
}

template <MergeDType kDType>
__device__ __forceinline__ RawVector<kDType> load_vector(const void* base, int64_t offset) {
  const char* at = static_cast<const char*>(base) + offset * element_bytes<kDType>();
  if constexpr (kDType == MergeDType::kFloat32) {
    return {reinterpret_cast<const float4*>(at)[0], reinterpret_cast<const float4*>(at)[1]};
  } else {
    return {*reinterpret_cast<const uint4*>(at)};
  }
}

// The 8 values of a vector: BF16 widens exactly (the bits shifted up).
template <MergeDType kDType>
__device__ __forceinline__ void widen(const RawVector<kDType>& g, float (&x)[MergeTraits::kVectorDims]) {
  if constexpr (kDType == MergeDType::kFloat32) {
    x[0] = g.low.x, x[1] = g.low.y, x[2] = g.low.z, x[3] = g.low.w;
    x[4] = g.high.x, x[5] = g.high.y, x[6] = g.high.z, x[7] = g.high.w;
  } else {
    const uint32_t words[4] = {g.bits.x, g.bits.y, g.bits.z, g.bits.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __uint_as_float(words[i] << 16);
      x[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  }
}

// Stores 8 values (BF16: rounded to nearest even) as one or two 16-byte vectors.
template <MergeDType kDType>
__device__ __forceinline__ void store_vector(void* base, int64_t offset, const float (&x)[MergeTraits::kVectorDims]) {
  char* at = static_cast<char*>(base) + offset * element_bytes<kDType>();
  if constexpr (kDType == MergeDType::kFloat32) {
    reinterpret_cast<float4*>(at)[0] = make_float4(x[0], x[1], x[2], x[3]);
    reinterpret_cast<float4*>(at)[1] = make_float4(x[4], x[5], x[6], x[7]);
  } else {
    *reinterpret_cast<uint4*>(at) = make_uint4(ptx::bf16x2_bits(x[0], x[1]), ptx::bf16x2_bits(x[2], x[3]),
                                               ptx::bf16x2_bits(x[4], x[5]), ptx::bf16x2_bits(x[6], x[7]));
  }
}

// The vector's output and, from the thread of a head row's first vector, the merged lse.
template <MergeDType kOut>
__device__ __forceinline__ void store_result(const MergeParams& p, uint32_t token, uint32_t head, int dim,
                                             const float (&acc)[MergeTraits::kVectorDims], float lse) {
  store_vector<kOut>(p.out, token * p.out_token_stride + head * p.out_head_stride + dim, acc);
  if (p.out_lse && dim == 0) p.out_lse[token * p.out_lse_token_stride + head * p.out_lse_head_stride] = lse;
}

// Folds the vectors of a rank batch into acc in rank order, weight
// exp(lse_r - max) * scale; empty ranks (lse = -inf) are skipped.
template <MergeDType kIn, int kBatch>
__device__ __forceinline__ void fold_batch(const RawVector<kIn> (&raw)[kBatch], const float (&lse)[kBatch], float max,
                                           float scale, float (&acc)[MergeTraits::kVectorDims]) {
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    if (lse[i] == -INFINITY) continue;
    const float weight = expf(lse[i] - max) * scale;
    float x[MergeTraits::kVectorDims];
    widen<kIn>(raw[i], x);
#pragma unroll
    for (int d = 0; d < MergeTraits::kVectorDims; ++d) acc[d] = fmaf(weight, x[d], acc[d]);
  }
}

// A thread a vector. The first rank batch's lse and vectors load at once,
// one memory round trip (an empty rank's vector is loaded, never used);
// then the largest lse m, the sum of exp(lse_r - m) in rank order, and the
// fold in rank order with weight exp(lse_r - m) / sum. Later batches (R >
// kBatch) reload their lse (L1 serves it: the threads of a head row read
// the same words) and load only the vectors of non-empty ranks. The fold
// starts from -0.0 so that a weight of 1 gives the partial back bit for bit
// (signed zeros included).
template <MergeDType kIn, MergeDType kOut, int kBatch>
__global__ void __launch_bounds__(MergeTraits::kThreads) merge_kernel(const __grid_constant__ MergeParams p) {
  using Tr = MergeTraits;
  static_assert(kBatch >= 1 && kBatch <= Tr::max_batch(kIn), "a rank batch of MergeTraits::bound");
  const uint32_t vector = blockIdx.x * Tr::kThreads + threadIdx.x;
  ptx::grid_dependency_wait();  // the partials of the kernels before are complete and visible
  ptx::launch_dependents();
  if (vector >= p.vectors) return;
  const uint32_t pair = vector / static_cast<uint32_t>(p.vectors_per_head);
  const int dim = static_cast<int>(vector - pair * p.vectors_per_head) * Tr::kVectorDims;
  const uint32_t token = pair / static_cast<uint32_t>(p.heads), head = pair - token * p.heads;
  const int64_t lse_offset = token * p.lse_token_stride + head * p.lse_head_stride;
  const int64_t in_offset = token * p.partial_token_stride + head * p.partial_head_stride + dim;

  RawVector<kIn> raw[kBatch] = {};
  float lse[kBatch];
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    lse[i] = i < p.ranks ? p.lse[i][lse_offset] : -INFINITY;
    if (i < p.ranks) raw[i] = load_vector<kIn>(p.partial[i], in_offset);
  }
  // fmaxf passes over NaN; a NaN (or +inf) lse still makes its weight NaN below.
  float max = -INFINITY;
  bool any = false;
#pragma unroll
  for (int i = 0; i < kBatch; ++i) any |= lse[i] != -INFINITY, max = fmaxf(max, lse[i]);
  for (int r = kBatch; r < p.ranks; ++r) {
    const float l = p.lse[r][lse_offset];
    any |= l != -INFINITY, max = fmaxf(max, l);
  }
  float acc[Tr::kVectorDims];
  if (!any) {  // empty on every rank: zeros, lse -inf
#pragma unroll
    for (int d = 0; d < Tr::kVectorDims; ++d) acc[d] = 0.0f;
    store_result<kOut>(p, token, head, dim, acc, -INFINITY);
    return;
  }
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    if (lse[i] != -INFINITY) total += expf(lse[i] - max);
  }
  for (int r = kBatch; r < p.ranks; ++r) {
    const float l = p.lse[r][lse_offset];
    if (l != -INFINITY) total += expf(l - max);
  }
  const float scale = 1.0f / total;

#pragma unroll
  for (int d = 0; d < Tr::kVectorDims; ++d) acc[d] = -0.0f;
  fold_batch<kIn, kBatch>(raw, lse, max, scale, acc);
  for (int first = kBatch; first < p.ranks; first += kBatch) {
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = first + i;
      lse[i] = r < p.ranks ? p.lse[r][lse_offset] : -INFINITY;
      if (lse[i] != -INFINITY) raw[i] = load_vector<kIn>(p.partial[r], in_offset);
    }
    fold_batch<kIn, kBatch>(raw, lse, max, scale, acc);
  }
  store_result<kOut>(p, token, head, dim, acc, max + logf(total));
}

}  // namespace sparse_decode::merge
