// The steps every dsv4 kernel takes on a 64-column chunk (gather, Q K^T,
// softmax, P V) and the fold of group results into a token's output. Both
// kernels call exactly these, in the same order, so a token's output has the
// same bits whichever kernel ran (docs/kernels/large_batch.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/granules.h"
#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4/params.h"
#include "dsv4/traits.cuh"

namespace sparse_decode::dsv4 {


__device__ __forceinline__ int64_t row_offset(const PoolParams& pool, int64_t row) {
  if (pool.page_size == 1) return row * pool.row_stride;
  return (row / pool.page_size) * pool.page_stride + (row % pool.page_size) * pool.row_stride;
}

// A barrier among the math warps: __syncthreads without producers; with a
// producer warpgroup, hardware barrier 1 among the kThreads math threads
// (the producers take no part in it; they wait on the tiles' own barriers).
template <class Traits>
__device__ __forceinline__ void math_sync() {
  if constexpr (Traits::kProducerWarps == 0) {
    __syncthreads();
  } else {
    ptx::named_barrier_sync(Traits::kMathBarrier, Traits::kThreads);
  }
}

// The token's index at `column`, from global memory (-1 past the width).
__device__ __forceinline__ int32_t column_index(const Dsv4Params& p, int64_t token, int column) {
  return column < p.width ? p.indices[token * p.indices_stride + column] : -1;
}

// The index this thread's gather lane reads for the chunk at `column0`
// (-1 past the width), from global memory: the first chunk's.
template <class Traits>
__device__ __forceinline__ int32_t chunk_index(const Dsv4Params& p, int64_t token, int column0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  return column_index(p, token, column0 + warp * Traits::kGatherRowsPerWarp + lane % Traits::kGatherRowsPerWarp);
}

// The index a producer lane copies in chunk `chunk` of the token (lane l <
// kProducerRows of producer warp w: column 64 chunk + kProducerRows w + l),
// -1 past the width.
template <class Traits>
__device__ __forceinline__ int32_t producer_index(const Dsv4Params& p, int64_t token, int chunk) {
  const int lane = threadIdx.x % 32;
  const int column = chunk * Traits::kChunkColumns + (threadIdx.x / 32 - Traits::kFirstProducerWarp) * Traits::kProducerRows + lane;
  return lane < Traits::kProducerRows ? column_index(p, token, column) : -1;
}

// Copies the indices of the chunk at `column0` into staged.index[slot]
// (lanes 0..7 of each warp, one index each): they travel with the previous
// chunk's rows, so that issuing this chunk's row copies never waits on a load.
template <class Traits>
__device__ __forceinline__ void stage_chunk_indices(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                                    int column0, int slot) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane >= Traits::kGatherRowsPerWarp) return;
  const int offset = warp * Traits::kGatherRowsPerWarp + lane;
  const int column = column0 + offset;
  const int32_t* src = p.indices + token * p.indices_stride + (column < p.width ? column : 0);
  ptx::cp_async_4(ptx::smem_address(&s.staged.index[slot][offset]), src, column < p.width ? 4u : 0u);
}

// This thread's gather lane's index from staged.index[slot] (-1 past the width).
template <class Traits>
__device__ __forceinline__ int32_t staged_index(const ChunkSmem<Traits>& s, const Dsv4Params& p, int column0,
                                                int slot) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int offset = warp * Traits::kGatherRowsPerWarp + lane % Traits::kGatherRowsPerWarp;
  return column0 + offset < p.width ? s.staged.index[slot][offset] : -1;
}

// A row copy a lane issues later: see gather_chunk.
struct PendingRow {
  const uint8_t* src = nullptr;
  uint32_t dst = 0;
  uint32_t barrier = 0;
  uint32_t bytes = 0;  // 0: nothing pending
};

__device__ __forceinline__ void issue_pending_row(const PendingRow& row) {
  if (row.bytes != 0) ptx::cp_async_bulk_g2s(row.dst, row.src, row.bytes, row.barrier);
}

// One warp's rows [first_row, first_row + kRows) of a chunk into KV tile
// `buffer` (row-major, padded rows) by bulk copies: lane l < kRows copies
// row first_row + l with `index` (one 512- or 1024-byte copy), completing
// on rows_landed[buffer] (one arrival a warp, with the bytes it copies).
// Rows not copied (masked columns) are zero-filled by the warp first, so
// NaN in their rows never reaches the MMAs; the warp writes their bytes of
// the column mask. The issuing lanes do not wait for the copies. Lanes from
// `issue_now` on return their copy instead of issuing it (the caller issues
// it later with issue_pending_row, before the tile's wait).
template <class Traits, int kRows>
__device__ __forceinline__ PendingRow copy_rows(ChunkSmem<Traits>& s, const Dsv4Params& p, int first_row, int column0,
                                                int32_t index, int len, int window, bool count_out_of_range,
                                                int buffer, int issue_now = kRows) {
  static_assert(kRows % 8 == 0 && kRows <= 16, "whole bytes of the column mask; rows are bits of a ballot");
  constexpr uint32_t kRowBits = (1u << kRows) - 1;
  const int lane = threadIdx.x % 32;
  const int column = column0 + first_row + lane % kRows;
  const bool swa = column < kSwaColumns;
  const int64_t rows = swa ? p.swa.rows : p.compressed.rows;
  const bool listed = index >= 0 && column < len && (!swa || column < window);
  const bool active = listed && index < rows;
  if (listed && !active && lane < kRows && count_out_of_range) atomicAdd(p.out_of_range_count, 1);
  __syncwarp();  // reconverge before the ballots
  const bool load = active && !instrument::skips(p, instrument::kSkipRowLoads);
  const uint32_t mask = __ballot_sync(0xffffffffu, active) & kRowBits;
  const uint32_t copied = __ballot_sync(0xffffffffu, load) & kRowBits;
  if (lane < kRows / 8) s.column_mask[buffer][first_row / 8 + lane] = static_cast<uint8_t>(mask >> (8 * lane));
  for (uint32_t zero = ~copied & kRowBits; zero != 0; zero &= zero - 1) {
    const int row = first_row + __ffs(zero) - 1;
#pragma unroll
    for (int part = 0; part < Traits::kRowBytes / 512; ++part) {
      ptx::st_shared_zero16(ptx::smem_address(&s.kv[buffer][row][part * 512 + lane * 16]));
    }
  }
  __syncwarp();  // the zeros and the mask before the arrival that publishes the tile
  const uint32_t barrier = ptx::smem_address(&s.rows_landed[buffer]);
  if (lane == 0) ptx::mbarrier_arrive_expect_tx(barrier, __popc(copied) * Traits::kRowBytes);
  __syncwarp();  // the expected bytes before any copy completes
  PendingRow row;
  if (lane < kRows && load) {
    row.src = swa ? p.swa.data + row_offset(p.swa, index) : p.compressed.data + row_offset(p.compressed, index);
    row.dst = ptx::smem_address(&s.kv[buffer][first_row + lane][0]);
    row.barrier = barrier;
    row.bytes = Traits::kRowBytes;
    if (lane < issue_now) {
      issue_pending_row(row);
      row.bytes = 0;
    }
  }
  return row;
}

// The chunk's rows by the math warps: warp w copies rows 8w..8w+7 (copy_rows).
template <class Traits>
__device__ __forceinline__ PendingRow gather_chunk(ChunkSmem<Traits>& s, const Dsv4Params& p, int column0,
                                                   int32_t index, int len, int window, bool count_out_of_range,
                                                   int buffer, int issue_now = Traits::kGatherRowsPerWarp) {
  constexpr int kRows = Traits::kGatherRowsPerWarp;
  return copy_rows<Traits, kRows>(s, p, threadIdx.x / 32 * kRows, column0, index, len, window, count_out_of_range,
                                  buffer, issue_now);
}

// With a producer warpgroup: producer warp w copies rows kProducerRows * w
// .. + kProducerRows - 1 of the chunk, issuing every copy at once.
template <class Traits>
__device__ __forceinline__ void produce_chunk(ChunkSmem<Traits>& s, const Dsv4Params& p, int column0, int32_t index,
                                              int len, int window, bool count_out_of_range, int buffer) {
  constexpr int kRows = Traits::kProducerRows;
  copy_rows<Traits, kRows>(s, p, (threadIdx.x / 32 - Traits::kFirstProducerWarp) * kRows, column0, index, len, window,
                           count_out_of_range, buffer);
}

// The tiles' barriers (one arrival a copying warp a phase), initialized by
// load_query before any copy into shared memory and a CTA barrier.
template <class Traits>
__device__ __forceinline__ void init_tile_barriers(ChunkSmem<Traits>& s) {
  constexpr int kCopyingWarps = Traits::kProducerWarps > 0 ? Traits::kProducerWarps : Traits::kWarps;
  if (threadIdx.x < Traits::kBuffers) {
    ptx::mbarrier_init(ptx::smem_address(&s.rows_landed[threadIdx.x]), kCopyingWarps);
  }
  __syncthreads();
}

// Waits for use `use` (0, 1, ...) of tile `buffer` to land.
template <class Traits>
__device__ __forceinline__ void wait_tile(ChunkSmem<Traits>& s, int buffer, int use) {
  ptx::mbarrier_wait_parity(ptx::smem_address(&s.rows_landed[buffer]), use & 1);
}

// The query heads a CTA serves: kHeads (16 or 64) from `first`, of which
// `count` exist (8 with H = 8: the other 8 rows of the MMAs see a zero query
// and are never stored).
struct HeadGroup {
  int first;
  int count;
};

template <int kHeads>
__device__ __forceinline__ HeadGroup head_group(const Dsv4Params& p, int group) {
  const int first = group * kHeads;
  return {first, p.num_heads - first < kHeads ? p.num_heads - first : kHeads};
}

// Copies the token's query heads into the Q tile: in each pass thread t
// copies piece t/8 (+32 per pass) of heads t%8 + 8j (j < kHeads / 8), so a
// warp fills whole core matrices; heads past the count are zero-filled
// (there are always 8). FP8: one pass, BF16: two.
template <class Traits>
__device__ __forceinline__ void load_query(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                           HeadGroup heads) {
  init_tile_barriers<Traits>(s);  // once a CTA, before its first copy
  if constexpr (Traits::kProducerWarps > 0) {
    if (threadIdx.x >= Traits::kThreads) return;  // the producers copy no query
  }
  constexpr int kPiecesPerPass = Traits::kThreads / 8;
  const int head = threadIdx.x % 8;
  const uint8_t* row = p.q + token * p.q_token_stride + (heads.first + head) * p.q_head_stride;
#pragma unroll
  for (int pass = 0; pass < Traits::kPieces / kPiecesPerPass; ++pass) {
    const int piece = threadIdx.x / 8 + pass * kPiecesPerPass;
    const uint8_t* src = row + piece * 16;
#pragma unroll
    for (int j = 0; j < Traits::kHeads / 8; ++j) {
      const bool exists = j == 0 || head + 8 * j < heads.count;
      ptx::cp_async_16(ptx::smem_address(&s.q[j][piece][head][0]), exists ? src + 8 * j * p.q_head_stride : src,
                       exists ? 16u : 0u);
    }
  }
}

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
// row-major tile, so each warp loads the mma A fragment of its 16 rows with
// one ldmatrix.x4 a k-step. FP8 wgmma accumulates with reduced precision:
// each run of kStepsPerAccumulator k-steps has its own accumulator set,
// summed in FP32 in set order ((s0 + s1) + s2) + s3. 16 heads: all sets live,
// loaded kScoreBatch k-steps at a time; 64 heads: sets 0 and 1, then each
// later set into slot 1. The result goes to scores[slot].
template <class Traits>
__device__ __forceinline__ void score_chunk(ChunkSmem<Traits>& s, int buffer, int slot) {
  // The warpgroup broadcast from lane 0: the compiler then knows it is warp
  // uniform and builds the Q descriptors in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int piece0 = warpgroup * Traits::kPiecesPerWarpgroup;
  // ldmatrix.x4: matrices (rows 0-7, bytes 0-15), (rows 8-15, 0-15), (0-7, 16-31), (8-15, 16-31) of a k-step.
  const int row = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_base = ptx::smem_address(&s.kv[buffer][row][piece0 * 16 + (lane >> 4) * 16]);
  const uint64_t q = ptx::wgmma_descriptor(ptx::smem_address(&s.q[0][piece0][0][0]), Traits::kCoreBytes,
                                           Traits::kRowGroupBytes);
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

// Rounds 4 probabilities for P V and stores them at probs[..][head][column]:
// FP16 for FP8 rows, BF16 hi + lo for BF16 rows. Returns their sum as P V
// multiplies them ((p0 + p1) + (p2 + p3); hi + lo is exact in FP32).
template <class Traits>
__device__ __forceinline__ float store_probabilities(ChunkSmem<Traits>& s, int head, int column, const float (&p)[4],
                                                   int slot) {
  if constexpr (!Traits::kBf16) {
    const __half2 p01 = __floats2half2_rn(p[0], p[1]), p23 = __floats2half2_rn(p[2], p[3]);
    *reinterpret_cast<uint2*>(&s.probs[slot][0][head][column]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&p01), *reinterpret_cast<const uint32_t*>(&p23));
    const float2 f01 = __half22float2(p01), f23 = __half22float2(p23);
    return (f01.x + f01.y) + (f23.x + f23.y);
  } else {
    const __nv_bfloat162 hi01 = __floats2bfloat162_rn(p[0], p[1]), hi23 = __floats2bfloat162_rn(p[2], p[3]);
    const float2 h01 = __bfloat1622float2(hi01), h23 = __bfloat1622float2(hi23);
    const __nv_bfloat162 lo01 = __floats2bfloat162_rn(__fsub_rn(p[0], h01.x), __fsub_rn(p[1], h01.y));
    const __nv_bfloat162 lo23 = __floats2bfloat162_rn(__fsub_rn(p[2], h23.x), __fsub_rn(p[3], h23.y));
    *reinterpret_cast<uint2*>(&s.probs[slot][0][head][column]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&hi01), *reinterpret_cast<const uint32_t*>(&hi23));
    *reinterpret_cast<uint2*>(&s.probs[slot][1][head][column]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo01), *reinterpret_cast<const uint32_t*>(&lo23));
    const float2 l01 = __bfloat1622float2(lo01), l23 = __bfloat1622float2(lo23);
    const float e0 = __fadd_rn(h01.x, l01.x), e1 = __fadd_rn(h01.y, l01.y);
    const float e2 = __fadd_rn(h23.x, l23.x), e3 = __fadd_rn(h23.y, l23.y);
    return __fadd_rn(__fadd_rn(e0, e1), __fadd_rn(e2, e3));
  }
}

// Online softmax over the chunk: kSoftmaxThreads threads a head (16 at 16
// heads, 4 at 64), kSoftmaxColumns columns each (4, 16). Writes the rounded
// probabilities and the group's running statistics (restarted at the first
// chunk of a group) into chunk slot `slot`; the statistics so far are the
// previous slot's.
template <class Traits>
__device__ __forceinline__ void softmax_chunk(ChunkSmem<Traits>& s, int buffer, float scale_log2, bool group_start,
                                              int slot) {
  static_assert(Traits::kWarpgroups == 2, "the score is the sum of the two warpgroups' halves");
  constexpr int kThreadsPerHead = Traits::kSoftmaxThreads, kColumns = Traits::kSoftmaxColumns;
  const int head = threadIdx.x / kThreadsPerHead, part = threadIdx.x % kThreadsPerHead;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask[buffer]) >> (part * kColumns);
  float v[kColumns];
#pragma unroll
  for (int quad = 0; quad < kColumns / 4; ++quad) {
    const float4 lo = *reinterpret_cast<const float4*>(&s.scores[slot][0][head][part * kColumns + 4 * quad]);
    const float4 hi = *reinterpret_cast<const float4*>(&s.scores[slot][1][head][part * kColumns + 4 * quad]);
    // Explicit roundings (no contraction): all kernels must do the same float operations.
    v[4 * quad + 0] = __fmul_rn(__fadd_rn(lo.x, hi.x), scale_log2);
    v[4 * quad + 1] = __fmul_rn(__fadd_rn(lo.y, hi.y), scale_log2);
    v[4 * quad + 2] = __fmul_rn(__fadd_rn(lo.z, hi.z), scale_log2);
    v[4 * quad + 3] = __fmul_rn(__fadd_rn(lo.w, hi.w), scale_log2);
  }
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    if (!((mask >> i) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
#pragma unroll
  for (int offset = 1; offset < kThreadsPerHead; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  const int previous = (slot + Traits::kChunkSlots - 1) % Traits::kChunkSlots;
  const float old_max = group_start ? -INFINITY : s.running_max[previous][head];
  const float old_sum = group_start ? 0.0f : s.running_sum[previous][head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  // The denominator sums what P V multiplies: ((quad 0 + quad 1) + quad 2) + ...
  float sum = 0.0f;
#pragma unroll
  for (int quad = 0; quad < kColumns / 4; ++quad) {
    const float probabilities[4] = {ptx::exp2_approx(__fsub_rn(v[4 * quad + 0], base)),
                                    ptx::exp2_approx(__fsub_rn(v[4 * quad + 1], base)),
                                    ptx::exp2_approx(__fsub_rn(v[4 * quad + 2], base)),
                                    ptx::exp2_approx(__fsub_rn(v[4 * quad + 3], base))};
    const float quad_sum = store_probabilities<Traits>(s, head, part * kColumns + 4 * quad, probabilities, slot);
    sum = quad == 0 ? quad_sum : __fadd_rn(sum, quad_sum);
  }
#pragma unroll
  for (int offset = 1; offset < kThreadsPerHead; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncwarp();
  if (part == 0) {
    const float factor = ptx::exp2_approx(__fsub_rn(old_max, base));  // 0 while old_max is -inf
    s.rescale[slot][head] = factor;
    s.running_sum[slot][head] = __fmaf_rn(old_sum, factor, sum);
    s.running_max[slot][head] = new_max;
  }
}

// Shared-memory address of byte `byte` of row `row` of KV tile `buffer`.
template <class Traits>
__device__ __forceinline__ uint32_t kv_address(const ChunkSmem<Traits>& s, int buffer, int row, int byte) {
  return ptx::smem_address(&s.kv[buffer][row][byte]);
}

// Shared-memory address of this lane's ldmatrix.x4 rows of P for head tile 0
// (rows = heads, 16 columns from column 0); tile t is 16 rows further.
template <class Traits>
__device__ __forceinline__ uint32_t prob_fragment_base(const ChunkSmem<Traits>& s, int part, int slot) {
  const int lane = threadIdx.x % 32;
  return ptx::smem_address(&s.probs[slot][part][(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
}

// The warp's index among the warps that run P V (warps kWarps.. with P V warps).
template <class Traits>
__device__ __forceinline__ int pv_warp() {
  return static_cast<int>((threadIdx.x - (Traits::kPvWarps > 0 ? Traits::kThreads : 0)) / 32);
}
template <class Traits>
inline constexpr uint32_t kProbTileBytes = 16 * Traits::kProbRowHalves * 2;

// O += P V from the BF16 tile, dim groups [first_group, first_group + kGroups)
// of the warp: ldmatrix.trans of a core matrix (8 rows x 8 dims) is a B
// fragment as it is, so an ldmatrix.x4.trans gives the two n-tiles of 8 dims
// of a 16-dim half (granule_dim() says which dims a thread holds), used by
// every head tile. P is BF16 hi + lo: two MMAs a step, the small part first.
template <class Traits, int kGroups>
__device__ __forceinline__ void accumulate_dims_bf16(ChunkSmem<Traits>& s, int buffer,
                                                     DimGroupFragment<Traits, kGroups>& acc, int first_group,
                                                     int slot) {
  constexpr int kTiles = Traits::kHeadTiles;
  const int warp = pv_warp<Traits>(), lane = threadIdx.x % 32;
  const uint32_t hi_base = prob_fragment_base<Traits>(s, 0, slot), lo_base = prob_fragment_base<Traits>(s, 1, slot);
  // Matrices of an ldmatrix.x4.trans: rows k..k+7 / k+8..k+15 (row groups) x dims d..d+7 / d+8..d+15 (pieces).
  const int piece0 = (warp * Traits::kDimsPerWarp + first_group * 32) / 8 + (lane >> 4);
  const uint32_t v_base = kv_address<Traits>(s, buffer, ((lane >> 3) & 1) * 8 + (lane & 7), piece0 * 16);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t hi[kTiles][4], lo[kTiles][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      ptx::ldmatrix_x4(hi[t], hi_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
      ptx::ldmatrix_x4(lo[t], lo_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, v_base + kk * Traits::kTileRows16Bytes + (4 * g + 2 * half) * Traits::kTilePieceBytes);
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          ptx::mma_bf16_16x8x16(acc[t][g][half][0], lo[t], r[0], r[1]);
          ptx::mma_bf16_16x8x16(acc[t][g][half][1], lo[t], r[2], r[3]);
          ptx::mma_bf16_16x8x16(acc[t][g][half][0], hi[t], r[0], r[1]);
          ptx::mma_bf16_16x8x16(acc[t][g][half][1], hi[t], r[2], r[3]);
        }
      }
  }
}

// O += P V from the FP8 tile, dim groups [first_group, first_group + kGroups)
// of the warp: ldmatrix.trans on byte pairs, then a byte permute splits each
// pair into the even-dim and odd-dim B fragments, converted exactly to FP16
// once and used by every head tile. So n-tile (half, parity) column n is dim
// 16*half + 2n + parity, and a thread ends up holding 4 consecutive dims of
// its heads. With one dim group (the 64-head stream kernel, short of
// registers) each head tile's P fragment is loaded just before its MMAs;
// with more, all tiles' fragments are loaded once a k-step.
template <class Traits, int kGroups>
__device__ __forceinline__ void accumulate_dims_fp8(ChunkSmem<Traits>& s, int buffer,
                                                    DimGroupFragment<Traits, kGroups>& acc, int first_group,
                                                    int slot) {
  constexpr int kTiles = Traits::kHeadTiles;
  constexpr bool kLoadPerTile = kGroups == 1 && kTiles > 1;
  const int warp = pv_warp<Traits>(), lane = threadIdx.x % 32;
  const int d0 = warp * Traits::kDimsPerWarp + first_group * 32;
  const uint32_t p_base = prob_fragment_base<Traits>(s, 0, slot);
  // Matrices of an ldmatrix.x4: rows k..k+7 / k+8..k+15 (row groups) x dims d..d+15 / d+16..d+31 (pieces).
  const uint32_t v_base = kv_address<Traits>(s, buffer, ((lane >> 3) & 1) * 8 + (lane & 7), (d0 / 16 + (lane >> 4)) * 16);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t a[kLoadPerTile ? 1 : kTiles][4];
    if constexpr (!kLoadPerTile) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        ptx::ldmatrix_x4(a[t], p_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
      }
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * Traits::kTileRows16Bytes + g * 2 * Traits::kTilePieceBytes);
      uint32_t b[2][2][2];  // [half][even / odd dims][rows k.. / k+8..]
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // bytes (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
        const uint32_t rows_lo = __byte_perm(r[2 * half], 0, 0x3120);
        const uint32_t rows_hi = __byte_perm(r[2 * half + 1], 0, 0x3120);
        b[half][0][0] = ptx::e4m3x2_to_f16x2<false>(rows_lo), b[half][0][1] = ptx::e4m3x2_to_f16x2<false>(rows_hi);
        b[half][1][0] = ptx::e4m3x2_to_f16x2<true>(rows_lo), b[half][1][1] = ptx::e4m3x2_to_f16x2<true>(rows_hi);
      }
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        if constexpr (kLoadPerTile) ptx::ldmatrix_x4(a[0], p_base + t * kProbTileBytes<Traits> + kk * 16 * 2);
        const uint32_t(&tile_a)[4] = a[kLoadPerTile ? 0 : t];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          ptx::mma_f16_16x8x16(acc[t][g][half][0], tile_a, b[half][0][0], b[half][0][1]);
          ptx::mma_f16_16x8x16(acc[t][g][half][1], tile_a, b[half][1][0], b[half][1][1]);
        }
      }
    }
  }
}

// O += P V for kGroups of the warp's 32-dim groups from first_group (the
// fragment's values as they stand: the caller zeroes or rescales them),
// with the probabilities of chunk slot `slot`.
template <class Traits, int kGroups>
__device__ __forceinline__ void accumulate_dims(ChunkSmem<Traits>& s, int buffer,
                                                DimGroupFragment<Traits, kGroups>& acc, int first_group,
                                                int slot) {
  if constexpr (Traits::kBf16) {
    accumulate_dims_bf16<Traits, kGroups>(s, buffer, acc, first_group, slot);
  } else {
    accumulate_dims_fp8<Traits, kGroups>(s, buffer, acc, first_group, slot);
  }
}

// Which dims this CTA outputs: part k of a unit's kDimParts CTAs (adjacent
// blocks) outputs dim groups k * kOutputDimGroups.. of every warp.
template <class Traits>
__device__ __forceinline__ int first_output_dim_group() {
  return Traits::kDimParts == 1 ? 0 : static_cast<int>(blockIdx.x % Traits::kDimParts) * Traits::kOutputDimGroups;
}

// O += P V for the warp's dims this CTA outputs (O restarts at the first chunk of a group).
template <class Traits>
__device__ __forceinline__ void accumulate_chunk(ChunkSmem<Traits>& s, int buffer, OutputFragment<Traits>& acc,
                                                 bool group_start, int slot) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < Traits::kHeadTiles; ++t) {
    // A group starts from +0 (not from 0 * the previous group: -0 and NaN would survive).
    const float top = s.rescale[slot][16 * t + lane / 4], bottom = s.rescale[slot][16 * t + lane / 4 + 8];
#pragma unroll
    for (int g = 0; g < Traits::kOutputDimGroups; ++g)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int par = 0; par < 2; ++par) {
          float(&a)[4] = acc[t][g][h][par];
          a[0] = group_start ? 0.0f : __fmul_rn(a[0], top), a[1] = group_start ? 0.0f : __fmul_rn(a[1], top);
          a[2] = group_start ? 0.0f : __fmul_rn(a[2], bottom), a[3] = group_start ? 0.0f : __fmul_rn(a[3], bottom);
        }
  }
  accumulate_dims<Traits, Traits::kOutputDimGroups>(s, buffer, acc, first_output_dim_group<Traits>(), slot);
}

// SWA columns valid for the token under seq_lens: min(128, position + 1),
// position = seq_lens[b] - q_len_b + (index of the token in request b).
// Called by every thread of a CTA that holds SWA columns (varlen: a barrier).
template <class Traits>
__device__ __forceinline__ int swa_window(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token) {
  int64_t position;
  if (!p.cum_seq_lens_q) {
    const int64_t request = token / p.q_len;
    position = int64_t{p.seq_lens[request]} - p.q_len + (token - request * p.q_len);
  } else {
    // Find the request whose query range holds the token (cum_seq_lens_q is
    // non-decreasing): the last of 256 evenly spaced pivots at or below the
    // token, then the requests between it and the next pivot, all threads at once.
    if (threadIdx.x == 0) s.request = 0;
    __syncthreads();
    const int stride = (p.num_requests + Traits::kThreads - 1) / Traits::kThreads;
    const int pivot = threadIdx.x * stride;
    if (pivot < p.num_requests && p.cum_seq_lens_q[pivot] <= token) atomicMax(&s.request, pivot);
    __syncthreads();
    const int first = s.request, last = min(first + stride, p.num_requests);
    __syncthreads();
    if (threadIdx.x == 0) s.request = -1;
    __syncthreads();
    for (int b = first + threadIdx.x; b < last; b += Traits::kThreads) {
      if (p.cum_seq_lens_q[b] <= token && token < p.cum_seq_lens_q[b + 1]) s.request = b;
    }
    __syncthreads();
    const int b = s.request;
    if (b < 0) return 0;
    const int64_t begin = p.cum_seq_lens_q[b], end = p.cum_seq_lens_q[b + 1];
    position = int64_t{p.seq_lens[b]} - (end - begin) + (token - begin);
  }
  return static_cast<int>(position < 0 ? 0 : position + 1 < kSwaColumns ? position + 1 : kSwaColumns);
}

// What the chunk walk of one token needs besides the chunks.
struct TokenScope {
  int64_t token;
  int len;          // active columns by lens (width without lens)
  int window;       // active SWA columns by seq_lens (128 without)
  float scale_log2; // bmm1_scale * log2(e)
  float sink;       // this thread's head's sink (threads < kHeads), -inf without sinks
  bool count_out_of_range;  // the counter is given, and this CTA is the token's first head group's (dim part 0)
  int32_t first_index;      // this thread's gather-lane index in the walk's first chunk (-1: none, or producers)
};

// A CTA's TokenScope (the window only where it holds SWA columns: with
// varlen seq_lens its search takes barriers). `sink`: -inf where the kernel
// leaves the sink to a later fold. first_column: the walk's first column
// where the math warps gather (-1 with producers): its indices are loaded
// first, so that their DRAM trip overlaps the lens and seq_lens loads.
template <class Traits>
__device__ __forceinline__ TokenScope token_scope(ChunkSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                                  HeadGroup heads, bool has_swa_columns, float sink,
                                                  int first_column) {
  TokenScope scope;
  scope.first_index = first_column >= 0 ? chunk_index<Traits>(p, token, first_column) : -1;
  scope.token = token;
  scope.len = p.lens ? p.lens[token] : p.width;
  scope.window = p.seq_lens && has_swa_columns ? swa_window<Traits>(s, p, token) : kSwaColumns;
  scope.scale_log2 = (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;
  scope.sink = sink;
  scope.count_out_of_range = p.out_of_range_count && heads.first == 0 && first_output_dim_group<Traits>() == 0;
  return scope;
}

// The P V step of the walks that keep a group's P V fragment over its
// chunks: accumulate_chunk, then group_end(acc, slot) after the group's last
// chunk (its statistics are then in running_max[slot] / running_sum[slot]).
template <class Traits, class GroupEnd>
struct GroupAccumulator {
  ChunkSmem<Traits>& s;
  OutputFragment<Traits>& acc;
  GroupEnd group_end;
  __device__ __forceinline__ void operator()(int buffer, bool group_start, bool group_last, int slot) {
    accumulate_chunk<Traits>(s, buffer, acc, group_start, slot);
    if (group_last) group_end(acc, slot);
  }
};

template <class Traits, class GroupEnd>
__device__ __forceinline__ GroupAccumulator<Traits, GroupEnd> accumulate_groups(ChunkSmem<Traits>& s,
                                                                                OutputFragment<Traits>& acc,
                                                                                GroupEnd group_end) {
  return {s, acc, group_end};
}

// The math of chunk i of a walk (its rows in tile `buffer`): Q K^T, softmax,
// then pv(buffer, group_start, group_last, slot 0), the P V step (GroupAccumulator,
// or the 64-head stream kernel's fold by dim group). Groups are runs of
// `per_group` chunks from the walk's first.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void chunk_math(ChunkSmem<Traits>& s, const TokenScope& scope, int i, int count,
                                           int per_group, int buffer, ChunkPv& pv, const PendingRow& pending = {}) {
  score_chunk<Traits>(s, buffer, 0);  // one chunk slot
  instrument::phase_mark(i, 3);
  issue_pending_row(pending);  // the rest of the next chunk's rows (64 heads: kGatherIssueNow)
  math_sync<Traits>();
  instrument::phase_mark(i, 4);
  const bool group_start = i % per_group == 0;
  softmax_chunk<Traits>(s, buffer, scope.scale_log2, group_start, 0);
  instrument::phase_mark(i, 5);
  math_sync<Traits>();
  instrument::phase_mark(i, 6);
  pv(buffer, group_start, i % per_group == per_group - 1 || i == count - 1, 0);
  instrument::phase_mark(i, 7);
}

// Two KV tiles: the rows of chunk i + 1 (and the indices of chunk i + 2) are
// in flight during chunk i's math. They are issued after the wait and fence
// for chunk i's rows (the index cp.async: so that the wait never waits on
// them). The first
// gather releases dependent grids (PDL); the sinks reach shared memory after
// it, so that their load never delays it.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_two_tiles(ChunkSmem<Traits>& s, const Dsv4Params& p,
                                                      const TokenScope& scope, int first, int count, int per_group,
                                                      ChunkPv& pv) {
  constexpr int kColumns = Traits::kChunkColumns;
  gather_chunk<Traits>(s, p, first * kColumns, scope.first_index, scope.len, scope.window, scope.count_out_of_range,
                       0);
  if (count > 1) stage_chunk_indices<Traits>(s, p, scope.token, (first + 1) * kColumns, 1);
  ptx::cp_async_commit();
  ptx::launch_dependents();
  if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = scope.sink * kLog2e;
  for (int i = 0; i < count; ++i) {
    const int buffer = i % Traits::kBuffers;
    instrument::phase_mark(i, 0);
    wait_tile<Traits>(s, buffer, i / Traits::kBuffers);
    ptx::cp_async_wait_group<0>();
    // Q (cp.async) is read by wgmma, and chunk i - 1's reads of the other tile
    // must precede the bulk copies into it: both cross the async proxy.
    ptx::fence_proxy_async_shared();
    // Chunk i's rows and chunk i + 1's indices are visible; chunk i - 1's P V is done with the other tile.
    __syncthreads();
    instrument::phase_mark(i, 1);
    PendingRow pending;
    if (i + 1 < count) {
      const int column0 = (first + i + 1) * kColumns;
      pending = gather_chunk<Traits>(s, p, column0, staged_index<Traits>(s, p, column0, (i + 1) % Traits::kBuffers),
                                     scope.len, scope.window, scope.count_out_of_range, buffer ^ 1,
                                     Traits::kGatherIssueNow);
      if (i + 2 < count) stage_chunk_indices<Traits>(s, p, scope.token, column0 + kColumns, i % Traits::kBuffers);
      ptx::cp_async_commit();
    }
    instrument::phase_mark(i, 2);
    if (instrument::skips(p, instrument::kSkipMath)) {
      issue_pending_row(pending);
      continue;
    }
    chunk_math<Traits>(s, scope, i, count, per_group, buffer, pv, pending);
  }
}

// One KV tile: chunk i's rows are gathered once chunk i - 1's P V is done
// with the tile, their indices loaded from global memory then. Meant for
// walks of one chunk (the cluster kernels and the BF16 split kernel up to
// W = 1024); longer walks run the same float operations, only slower.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_one_tile(ChunkSmem<Traits>& s, const Dsv4Params& p,
                                                     const TokenScope& scope, int first, int count, int per_group,
                                                     ChunkPv& pv) {
  constexpr int kColumns = Traits::kChunkColumns;
  for (int i = 0; i < count; ++i) {
    const int column0 = (first + i) * kColumns;
    if (i > 0) {
      // Chunk i - 1's reads of the tile (generic proxy) before the bulk copies into it (async proxy).
      ptx::fence_proxy_async_shared();
      __syncthreads();
    }
    instrument::phase_mark(i, 0);
    const int32_t index = i == 0 ? scope.first_index : chunk_index<Traits>(p, scope.token, column0);
    gather_chunk<Traits>(s, p, column0, index, scope.len, scope.window, scope.count_out_of_range, 0);
    ptx::cp_async_commit();
    if (i == 0) {
      ptx::launch_dependents();
      if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = scope.sink * kLog2e;
    }
    wait_tile<Traits>(s, 0, i);
    ptx::cp_async_wait_group<0>();
    instrument::phase_mark(i, 1);
    ptx::fence_proxy_async_shared();  // Q (cp.async) is read by wgmma (async proxy)
    __syncthreads();
    instrument::phase_mark(i, 2);
    if (instrument::skips(p, instrument::kSkipMath)) continue;
    chunk_math<Traits>(s, scope, i, count, per_group, 0, pv);
  }
}

// The producer warpgroup's walk over chunks [first, first + count) of a
// token: chunk i goes into tile i % kBuffers once the math warps have
// released the tile's previous chunk (on the tile's hardware barrier, where
// the producers sleep without retrying; docs/kernels/large_batch.md). Each
// chunk's indices are loaded a chunk ahead, so that their latency hides
// behind that wait; the first chunk's (first_index, producer_index of
// chunk `first`) come from the caller, loaded beside the token's scope.
template <class Traits>
__device__ __forceinline__ void produce_chunks(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                               int first, int count, int32_t first_index) {
  constexpr int kColumns = Traits::kChunkColumns;
  int32_t index = first_index;
  for (int i = 0; i < count; ++i) {
    const int buffer = i % Traits::kBuffers;
    const int32_t next = i + 1 < count ? producer_index<Traits>(p, scope.token, first + i + 1) : -1;
    if (i >= Traits::kBuffers) {
      ptx::named_barrier_sync(Traits::kTileFreeBarrier + buffer, Traits::kTileFreeThreads);
      // Generic-proxy accesses of the tile's last use before the bulk copies
      // (async proxy) into it: this lane's zero fills, and the math warps'
      // reads that the barrier ordered before this point. Keep it after the
      // barrier, unconditional.
      ptx::fence_proxy_async_shared();
    }
    produce_chunk<Traits>(s, p, (first + i) * kColumns, index, scope.len, scope.window, scope.count_out_of_range,
                          buffer);
    if (i == 0) ptx::launch_dependents();
    index = next;
  }
}

// The math warps' walk with a producer warpgroup (produce_chunks): chunk i's
// rows are in tile i % kBuffers once rows_landed says so; after its P V the
// math warps release the tile for the producers' next copies (the tile's
// hardware barrier; only where a later chunk refills it, so that every
// arrival meets the producers' wait).
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_fed(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                                int count, int per_group, ChunkPv& pv) {
  if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = scope.sink * kLog2e;
  ptx::cp_async_commit();  // load_query's copies: wait_group waits for committed groups only
  ptx::cp_async_wait_group<0>();
  ptx::fence_proxy_async_shared();  // Q (cp.async) is read by wgmma (async proxy)
  math_sync<Traits>();
  instrument::phase_span(2);  // the query has landed
  for (int i = 0; i < count; ++i) {
    const int buffer = i % Traits::kBuffers;
    instrument::phase_mark(i, 0);
    wait_tile<Traits>(s, buffer, i / Traits::kBuffers);
    instrument::phase_mark(i, 1);
    instrument::phase_mark(i, 2);
    if (!instrument::skips(p, instrument::kSkipMath)) chunk_math<Traits>(s, scope, i, count, per_group, buffer, pv);
    // The warp's reads of the tile are done (their values fed the MMAs), as
    // when a consumer releases a stage in CUTLASS's TMA pipelines (no proxy fence).
    if (i + Traits::kBuffers < count) {
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + buffer, Traits::kTileFreeThreads);
    }
  }
}

// With P V warps, the scoring warps' walk (threads < kThreads): Q K^T and
// the softmax of chunk i into chunk slot i % 2, handed over to the P V
// warps (walk_chunks_after_scores) on the slot's two barriers. Chunk i's
// softmax waits for chunk i - 2's P V to leave the slot (its probabilities,
// rescale factors and statistics).
template <class Traits>
__device__ __forceinline__ void score_chunks(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                             int count, int per_group) {
  static_assert(Traits::kPvWarps > 0, "the scoring side of a walk with P V warps");
  constexpr int kSlots = Traits::kChunkSlots, kHandoff = Traits::kSlotHandoffThreads;
  if (threadIdx.x < Traits::kHeads) s.sink_log2[threadIdx.x] = scope.sink * kLog2e;
  ptx::cp_async_commit();  // load_query's copies
  ptx::cp_async_wait_group<0>();
  ptx::fence_proxy_async_shared();  // Q (cp.async) is read by wgmma (async proxy)
  math_sync<Traits>();
  instrument::phase_span(2);  // the query has landed
  const auto mark = [&](int i, int k) {
    if (threadIdx.x == 0) instrument::phase_mark_in(0, i, k);
  };
  for (int i = 0; i < count; ++i) {
    const int buffer = i % Traits::kBuffers, slot = i % kSlots;
    mark(i, 0);
    wait_tile<Traits>(s, buffer, i / Traits::kBuffers);
    mark(i, 1), mark(i, 2);
    if (!instrument::skips(p, instrument::kSkipMath)) score_chunk<Traits>(s, buffer, slot);
    mark(i, 3);
    // Both halves of the scores are in the slot, and chunk i - 1's softmax
    // has written the statistics this one continues from.
    math_sync<Traits>();
    mark(i, 4);
    if (i >= kSlots) ptx::named_barrier_sync(Traits::kProbsFreeBarrier + slot, kHandoff);
    mark(i, 5);
    if (!instrument::skips(p, instrument::kSkipMath)) softmax_chunk<Traits>(s, buffer, scope.scale_log2, i % per_group == 0, slot);
    mark(i, 6);
    ptx::named_barrier_arrive(Traits::kProbsReadyBarrier + slot, kHandoff);
    mark(i, 7);
  }
}

// With P V warps, their walk: chunk i's P V step pv(buffer, group_start,
// group_last, slot) once the scoring warps have handed over its slot; then
// the slot goes back to them (if a later chunk uses it) and the tile to the
// producers (if a later chunk refills it). The P V warps are the tile's
// last readers: the scoring warps' reads of K came before the handover.
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks_after_scores(ChunkSmem<Traits>& s, const Dsv4Params& p, int count,
                                                         int per_group, ChunkPv& pv) {
  constexpr int kSlots = Traits::kChunkSlots, kHandoff = Traits::kSlotHandoffThreads;
  const auto mark = [&](int i, int k) {
    if (threadIdx.x == Traits::kThreads) instrument::phase_mark_in(1, i, k);
  };
  for (int i = 0; i < count; ++i) {
    const int buffer = i % Traits::kBuffers, slot = i % kSlots;
    mark(i, 0);
    wait_tile<Traits>(s, buffer, i / Traits::kBuffers);  // V: the rows' bytes, as the scoring warps saw them land
    mark(i, 1);
    ptx::named_barrier_sync(Traits::kProbsReadyBarrier + slot, kHandoff);
    for (int k = 2; k < 7; ++k) mark(i, k);
    if (!instrument::skips(p, instrument::kSkipMath)) pv(buffer, i % per_group == 0, i % per_group == per_group - 1 || i == count - 1, slot);
    mark(i, 7);
    if (i + kSlots < count) ptx::named_barrier_arrive(Traits::kProbsFreeBarrier + slot, kHandoff);
    if (i + Traits::kBuffers < count) {
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + buffer, Traits::kTileFreeThreads);
    }
  }
}

// Walks chunks [first, first + count) of a token with the traits' KV tiles;
// pv is the P V step (chunk_math). With producers the walk starts at chunk
// `first` of produce_chunks; with P V warps this is their side of the walk
// (score_chunks is the other).
template <class Traits, class ChunkPv>
__device__ __forceinline__ void walk_chunks(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                            int first, int count, int per_group, ChunkPv&& pv) {
  if constexpr (Traits::kPvWarps > 0) {
    walk_chunks_after_scores<Traits>(s, p, count, per_group, pv);
  } else if constexpr (Traits::kProducerWarps > 0) {
    walk_chunks_fed<Traits>(s, p, scope, count, per_group, pv);
  } else if constexpr (Traits::kBuffers == 2) {
    walk_chunks_two_tiles<Traits>(s, p, scope, first, count, per_group, pv);
  } else {
    walk_chunks_one_tile<Traits>(s, p, scope, first, count, per_group, pv);
  }
}

// Walks chunks [first, first + count) in groups of per_group chunks and
// calls group_end(fragment, slot) with each group's P V sum (its statistics
// are then in running_max[slot] / running_sum[slot]). Groups of one chunk (W <= 1024) start
// each chunk from a fresh fragment: no rescale step, the zeros go into the
// first MMAs; the float operations are those of accumulate_chunk.
template <class Traits, class GroupEnd>
__device__ __forceinline__ void walk_groups(ChunkSmem<Traits>& s, const Dsv4Params& p, const TokenScope& scope,
                                            int first, int count, int per_group, GroupEnd&& group_end) {
  if (per_group == 1) {
    walk_chunks<Traits>(s, p, scope, first, count, 1, [&](int buffer, bool, bool, int slot) {
      OutputFragment<Traits> group = {};
      accumulate_dims<Traits, Traits::kOutputDimGroups>(s, buffer, group, first_output_dim_group<Traits>(), slot);
      group_end(group, slot);
    });
  } else {
    OutputFragment<Traits> acc = {};
    walk_chunks<Traits>(s, p, scope, first, count, per_group, accumulate_groups<Traits>(s, acc, group_end));
  }
}

// A token's output so far, per head: the fold of its groups in group order.
// Group c (statistics m_c, l_c; P V sum a_c, relative to its own max m_c)
// enters as
//   O <- a_c * take + O * keep,  keep = 2^(M - M'), take = 2^(m_c - M'),
//   L <- L * keep + take * l_c,  with M' = max(M, m_c):
// the same float operations in every kernel. a_c travels in FP32 (a rounding
// to FP16 would cost 2.5 instructions an element more in every fold).
struct FoldState {
  float max = -INFINITY;  // log2 domain
  float sum = 0.0f;
};

struct FoldWeights {
  float keep;  // on the output so far
  float take;  // on the group's P V sum
};

__device__ __forceinline__ FoldWeights fold_group(FoldState& state, float group_max, float group_sum) {
  const float new_max = fmaxf(state.max, group_max);
  const float keep = state.max == -INFINITY ? 0.0f : ptx::exp2_approx(state.max - new_max);
  const float take = group_max == -INFINITY ? 0.0f : ptx::exp2_approx(group_max - new_max);
  state.sum = __fmaf_rn(state.sum, keep, __fmul_rn(take, group_sum));
  state.max = new_max;
  return {keep, take};
}

__device__ __forceinline__ float fold_value(float output, FoldWeights w, float group_value) {
  return __fmaf_rn(group_value, w.take, __fmul_rn(output, w.keep));
}

// Factor on the folded output: bmm2 over the softmax denominator, sink included.
// A token with no active column gets zeros (and lse -inf), sink or not.
__device__ __forceinline__ float output_scale(const FoldState& state, float sink_log2, float bmm2) {
  if (state.max == -INFINITY) return 0.0f;
  return bmm2 / (state.sum + ptx::exp2_approx(sink_log2 - state.max));
}

// Stores a granule of a head's output as BF16: its 4 values in travel order,
// scaled; `first_dim` is granule_dim(granule, 0).
template <class Traits>
__device__ __forceinline__ void store_granule(uint16_t* out_head, int first_dim, float v0, float v1, float v2,
                                              float v3) {
  if constexpr (!Traits::kBf16) {
    *reinterpret_cast<uint2*>(out_head + first_dim) = make_uint2(ptx::bf16x2_bits(v0, v1), ptx::bf16x2_bits(v2, v3));
  } else {
    // Dims d, d + 1 hold v0, v2; dims d + 8, d + 9 hold v1, v3.
    *reinterpret_cast<uint32_t*>(out_head + first_dim) = ptx::bf16x2_bits(v0, v2);
    *reinterpret_cast<uint32_t*>(out_head + first_dim + 8) = ptx::bf16x2_bits(v1, v3);
  }
}

// A group's P V sum as it leaves a CTA (the cluster kernel's DSMEM sends,
// the split kernel's workspace): calls emit(granule, head, values) for each
// granule of this thread's P V fragment and each of its heads (16t + lane / 4
// and 16t + lane / 4 + 8 of head tile t); values are the granule's 4 FP32
// values in travel order (granule_dim).
template <class Traits, class Emit>
__device__ __forceinline__ void emit_group_values(const OutputFragment<Traits>& acc, Emit&& emit) {
  static_assert(Traits::kDimParts == 1, "the split and cluster kernels send all of a warp's dims");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < Traits::kHeadTiles; ++t) {
    const int head = 16 * t + lane / 4;
#pragma unroll
    for (int g = 0; g < Traits::kDimGroups; ++g)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int granule = (warp * Traits::kDimsPerWarp + g * 32 + half * 16) / Traits::kGranuleDims + lane % 4;
        const float(&even)[4] = acc[t][g][half][0];
        const float(&odd)[4] = acc[t][g][half][1];
        emit(granule, head, make_float4(even[0], odd[0], even[1], odd[1]));
        emit(granule, head + 8, make_float4(even[2], odd[2], even[3], odd[3]));
      }
  }
}

__device__ __forceinline__ float output_lse(const FoldState& state) {
  return state.max == -INFINITY ? -INFINITY : (state.max + __log2f(state.sum)) * kLn2;
}

// Folds the `groups` group results of head threadIdx.x % kHeads in group order,
// scales and stores BF16 (and lse, when lse_head is given). The output's 128
// granules are dealt to `owners` CTAs as in the cluster kernel (granule g to
// CTA g % owners); this one is `rank` and serves local granules
// threadIdx.x / kHeads, + kThreads / kHeads, ... of its own (a combine CTA
// of fewer threads has one granule a thread: owned <= threads / kHeads).
// stats(c): group c's (max, sum); values(c, local): its 4 FP32 P V values
// of the local granule. kGroups >= groups bounds the unrolled loops (groups
// past `groups` are skipped).
template <class Traits, int kGroups, class Stats, class Values>
__device__ __forceinline__ void fold_groups(int groups, int rank, int owners, int heads, float sink_log2, float bmm2,
                                            uint16_t* out_head, float* lse_head, Stats&& stats, Values&& values) {
  constexpr int kHeads = Traits::kHeads;
  constexpr int kGranuleStride = Traits::kThreads / kHeads;
  const int owned = owned_granules(Traits::kGranules, rank, owners);
  const int head = threadIdx.x % kHeads;
  if (head >= heads) return;  // a silent head of H = 8

  // Every group's statistics and the first granule's values load at once,
  // before the weights (the combine kernel reads them from L2: one round
  // trip instead of one a group, or two). Groups past `groups` load group
  // 0's again and are not used: groups >= 1 (a token has at least 2; the
  // cluster kernel's own-group fold, skip bit 2, passes 1).
  const int first_local = threadIdx.x / kHeads;
  float2 group_stats[kGroups];
  float4 first_parts[kGroups];
#pragma unroll
  for (int c = 0; c < kGroups; ++c) {
    const int loaded = c < groups ? c : 0;
    group_stats[c] = stats(loaded);
    if (first_local < owned) first_parts[c] = values(loaded, first_local);
  }
  FoldState state;
  FoldWeights weights[kGroups];
#pragma unroll
  for (int c = 0; c < kGroups; ++c) {
    if (c < groups) weights[c] = fold_group(state, group_stats[c].x, group_stats[c].y);
  }
  const float scale = output_scale(state, sink_log2, bmm2);
  const auto fold_granule = [&](int local, auto&& part_of) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kGroups; ++c) {
      if (c < groups) {
        const float4 part = part_of(c);
        o.x = fold_value(o.x, weights[c], part.x), o.y = fold_value(o.y, weights[c], part.y);
        o.z = fold_value(o.z, weights[c], part.z), o.w = fold_value(o.w, weights[c], part.w);
      }
    }
    store_granule<Traits>(out_head, granule_dim<Traits>(local * owners + rank, 0), o.x * scale, o.y * scale,
                          o.z * scale, o.w * scale);
  };
  if (first_local < owned) fold_granule(first_local, [&](int c) { return first_parts[c]; });
  for (int local = first_local + kGranuleStride; local < owned; local += kGranuleStride) {
    fold_granule(local, [&](int c) { return values(c, local); });
  }
  if (lse_head) *lse_head = output_lse(state);
}

// Calls fold(std::integral_constant<int, kGroups>) with a bound kGroups >=
// groups for fold_groups: exact for DeepSeek-V4's widths (128: 2 groups,
// 640: 10), the next bound otherwise.
template <int kMaxGroups, class Fold>
__device__ __forceinline__ void with_group_bound(int groups, Fold&& fold) {
  if (groups == 2) {
    fold(std::integral_constant<int, 2>{});
  } else if (groups <= 4) {
    fold(std::integral_constant<int, 4>{});
  } else if (groups <= 8) {
    fold(std::integral_constant<int, 8>{});
  } else if (groups == 10) {
    fold(std::integral_constant<int, 10>{});
  } else {
    fold(std::integral_constant<int, kMaxGroups>{});
  }
}

// Calls fold(std::integral_constant<int, kGroups>) with kGroups == groups
// (2 <= groups <= kMaxGroups; nothing otherwise): the combine kernel folds
// with the exact count, so every load it issues is used and none sits
// behind a `c < groups` branch (ptxas sank such loads into the fold, one
// L2 round trip a group; docs/kernels/split.md, "Fifteenth session").
template <int kMaxGroups, class Fold, int... kOffsets>
__device__ __forceinline__ void with_group_count(int groups, Fold&& fold, std::integer_sequence<int, kOffsets...>) {
  (void)((groups == kOffsets + 2 ? (fold(std::integral_constant<int, kOffsets + 2>{}), true) : false) || ...);
}
template <int kMaxGroups, class Fold>
__device__ __forceinline__ void with_group_count(int groups, Fold&& fold) {
  with_group_count<kMaxGroups>(groups, fold, std::make_integer_sequence<int, kMaxGroups - 1>{});
}

}  // namespace sparse_decode::dsv4
