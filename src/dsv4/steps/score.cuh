// Q K^T of a chunk: wgmma with K from registers (ldmatrix from the KV tile)
// and Q from the Q tile, the partial scores of each warpgroup to shared memory.
#pragma once

#include <cstdint>

#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "dsv4/smem.cuh"

namespace sparse_decode::dsv4 {

// Stores this warpgroup's partial S^T (the wgmma fragment: rows = columns of
// the chunk 16 warp + lane/4 (+8), heads 8j + 2(lane%4) (+1)) as
// scores[slot][warpgroup][head][column].
template <class Traits>
__device__ __forceinline__ void store_scores(ChunkSmem<Traits>& s, const float (&d)[Traits::kHeads / 2], int slot) {
  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int column = 16 * warp + lane / 4, head = 2 * (lane % 4);
  float(&scores)[Traits::kHeads][Traits::kScoreRowFloats] = s.scores[slot][warpgroup];
#pragma unroll
  for (int j = 0; j < Traits::kHeads / 8; ++j) {
    scores[8 * j + head][column] = d[4 * j + 0];
    scores[8 * j + head + 1][column] = d[4 * j + 1];
    scores[8 * j + head][column + 8] = d[4 * j + 2];
    scores[8 * j + head + 1][column + 8] = d[4 * j + 3];
  }
}

// One wgmma k-step of Q K^T with K from registers (the mma A fragment).
template <class Traits>
__device__ __forceinline__ void issue_score_step(float (&d)[Traits::kHeads / 2], const uint32_t (&a)[4], uint64_t q,
                                                 int k, bool accumulate) {
  const uint64_t b = ptx::wgmma_descriptor_advance(q, k * 2 * Traits::kCoreBytes);
  if constexpr (Traits::kBf16) {
    ptx::wgmma_bf16_64x16x16_rs(d, a, b, accumulate);
  } else if constexpr (Traits::kHeads == 16) {
    ptx::wgmma_e4m3_64x16x32_rs(d, a, b, accumulate);
  } else {
    ptx::wgmma_e4m3_64x64x32_rs(d, a, b, accumulate);
  }
}

// Loads the K fragments of k-steps [first, first + kSteps) and issues them
// into accumulator sets: k-step k goes to partial[slot(k / kPerSet)], the
// first k-step of a set overwriting it; one commit and wait.
template <class Traits, int kSteps, int kSlots, class Slot>
__device__ __forceinline__ void score_batch(float (&partial)[kSlots][Traits::kHeads / 2], uint32_t a_base, uint64_t q,
                                            int first, Slot&& slot) {
  constexpr int kPerSet = Traits::kStepsPerAccumulator;
  uint32_t a[kSteps][4];
#pragma unroll
  for (int j = 0; j < kSteps; ++j) ptx::ldmatrix_x4(a[j], a_base + (first + j) * 32);
  ptx::wgmma_fence();  // the A registers were just written
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const int k = first + j;
    issue_score_step<Traits>(partial[slot(k / kPerSet)], a[j], q, k, k % kPerSet != 0);
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait_all();
}

// Partial S^T = K Q^T (64 columns x kHeads heads) of this warpgroup's half
// of the dims, K from registers: wgmma cannot read an FP8 operand from the
// row-major KV tile, so each warp loads the mma A fragment of its 16 rows with
// one ldmatrix.x4 a k-step. FP8 wgmma accumulates with reduced precision:
// each run of kStepsPerAccumulator k-steps has its own accumulator set,
// summed in FP32 in set order ((s0 + s1) + s2) + s3. 16 heads: all sets live,
// loaded kScoreBatch k-steps at a time; 64 heads: sets 0 and 1, then each
// later set into slot 1. The result goes to scores[slot].
template <class Traits>
__device__ __forceinline__ void score_chunk(ChunkSmem<Traits>& s, int kv_tile, int slot) {
  // The warpgroup broadcast from lane 0: the compiler then knows it is warp
  // uniform and builds the Q descriptors in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int piece0 = warpgroup * Traits::kPiecesPerWarpgroup;
  // ldmatrix.x4: matrices (rows 0-7, bytes 0-15), (rows 8-15, 0-15), (0-7, 16-31), (8-15, 16-31) of a k-step.
  const int row = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_base = ptx::smem_address(&s.kv[kv_tile][row][piece0 * 16 + (lane >> 4) * 16]);
  const uint64_t q = ptx::wgmma_descriptor(ptx::smem_address(&s.q[0][piece0][0][0]), Traits::kCoreBytes,
                                           Traits::kSlabBytes);
  constexpr int kPerSet = Traits::kStepsPerAccumulator, kSets = Traits::kScoreSets, kLive = Traits::kLiveScoreSets;
  constexpr int kRegs = Traits::kHeads / 2;
  float partial[kLive][kRegs];
  if constexpr (kLive == kSets) {
#pragma unroll
    for (int first = 0; first < Traits::kScoreSteps; first += Traits::kScoreBatch) {
      score_batch<Traits, Traits::kScoreBatch>(partial, a_base, q, first, [](int set) { return set; });
    }
#pragma unroll
    for (int set = 1; set < kSets; ++set)
#pragma unroll
      for (int i = 0; i < kRegs; ++i) partial[0][i] += partial[set][i];
  } else {
    score_batch<Traits, kLive * kPerSet>(partial, a_base, q, 0, [](int set) { return set; });
#pragma unroll
    for (int set = 1; set < kLive; ++set)
#pragma unroll
      for (int i = 0; i < kRegs; ++i) partial[0][i] += partial[set][i];
#pragma unroll
    for (int set = kLive; set < kSets; ++set) {
      score_batch<Traits, kPerSet>(partial, a_base, q, set * kPerSet, [](int) { return 1; });
#pragma unroll
      for (int i = 0; i < kRegs; ++i) partial[0][i] += partial[1][i];
    }
  }
  store_scores<Traits>(s, partial[0], slot);
}

}  // namespace sparse_decode::dsv4
