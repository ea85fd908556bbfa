// The packed-row stream kernel of dsv4_decode_packed (large batches): one
// CTA a (token, 16-head group) walks the token's chunks (SWA, then extra),
// or a cluster pair walks half of them each and combines through DSMEM.
// A producer warpgroup bulk-copies each row's 576 data bytes into a KV tile
// as they are and writes the row's scales; the math warps read the E4M3
// bytes with ldmatrix and convert them exactly to FP16 in registers:
// S = Q K^T with FP16 wgmma (q rewritten to FP16 once, times a power of two
// per head), each 64-dim scale tile on its own accumulator, scaled in FP32;
// P V with FP16 mma.sync, the tile's scales folded into P relative to a
// power-of-two unit per (head, tile) that the warp carries across chunks.
// docs/kernels/packed.md ("The packed stream kernel") explains it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/instrument.cuh"
#include "common/math.cuh"
#include "common/ptx/cluster.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/load.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/params.h"
#include "dsv4_packed/split_workspace.cuh"
#include "dsv4_packed/stream_smem.cuh"

namespace sparse_decode::dsv4_packed::stream {

using Traits = StreamTraits;
using Smem = StreamSmem;
// The unit of an accumulator that has seen nothing yet: any real unit is larger.
inline constexpr int kNoUnit = -(1 << 20);
// The least P of an active column: 2^-126, the least normal float.
inline constexpr float kMinProbability = 1.17549435e-38f;

__device__ __forceinline__ void math_sync() { ptx::named_barrier_sync(Traits::kMathBarrier, Traits::kThreads); }

// 2^k for k <= 127; 0 below the normal range (k < -126).
__device__ __forceinline__ float pow2(int k) { return k < -126 ? 0.0f : __int_as_float((k + 127) << 23); }


// ---- producers ----

// Whether column `row` of chunk `chunk` is below its segment's width and len.
__device__ __forceinline__ bool column_listed(const Params& p, int chunk, int row, int swa_len, int extra_len) {
  const bool in_swa = chunk < p.swa.chunks;
  const int column = (in_swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns + row;
  return column < (in_swa ? p.swa.width : p.extra.width) && column < (in_swa ? swa_len : extra_len);
}

// The index of column `row` of chunk `chunk` of the token (-1 past the
// segment's width or its len).
__device__ __forceinline__ int32_t listed_index(const Params& p, int64_t token, int chunk, int row, int swa_len,
                                                int extra_len) {
  const bool in_swa = chunk < p.swa.chunks;
  const SegmentParams& seg = in_swa ? p.swa : p.extra;
  const int column = (in_swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns + row;
  return column_listed(p, chunk, row, swa_len, extra_len) ? seg.indices[token * seg.indices_stride + column] : -1;
}

// Producer warp w's rows 16w .. 16w + 15 of chunk i into tile i % kBuffers,
// once the math warps are done with the tile's previous chunk: a bulk copy
// of the 576 data bytes a row, and the row's 7 scale bytes (plain loads) as
// byte << 23. Masked rows are zero-filled, scales 0, so that NaN in unused
// slots never reaches an MMA. Arrivals on rows_landed: lane 0 with the
// expected bytes, then every lane after its scales, zeros and mask.
__device__ __forceinline__ void produce_chunk(Smem& s, const Params& p, int i, int chunk, int32_t index,
                                              bool count_out_of_range) {
  constexpr int kRows = Traits::kProducerRows;
  const int pw = threadIdx.x / 32 - Traits::kWarps, lane = threadIdx.x % 32;
  const int buffer = i % Traits::kBuffers;
  const int row = pw * kRows + lane % kRows;
  const SegmentParams& seg = chunk < p.swa.chunks ? p.swa : p.extra;
  const bool listed = lane < kRows && index >= 0;
  const bool active = listed && index < seg.rows;
  if (listed && !active && count_out_of_range) atomicAdd(p.out_of_range_count, 1);
  const uint8_t* data = nullptr;
  uint2 scale_bytes = make_uint2(0, 0);
  if (active) {
    const uint32_t page = static_cast<uint32_t>(index) / seg.page_size;
    const uint32_t slot = static_cast<uint32_t>(index) - page * seg.page_size;
    const uint8_t* page_base = seg.pool + page * seg.page_stride;
    data = page_base + slot * int64_t{kPackedDataBytes};
    scale_bytes = *reinterpret_cast<const uint2*>(page_base + seg.scale_offset + slot * int64_t{kPackedScaleBytes});
  }
  if (i >= Traits::kBuffers) {
    ptx::named_barrier_sync(Traits::kTileFreeBarrier + buffer, Traits::kLaunchThreads);
    // The tile's last use (generic proxy) before the bulk copies (async proxy) into it.
    ptx::fence_proxy_async_shared();
  }
  const uint32_t mask = __ballot_sync(0xffffffffu, active) & ((1u << kRows) - 1);
  const uint32_t barrier = ptx::smem_address(&s.rows_landed[buffer]);
  if (lane == 0) ptx::mbarrier_arrive_expect_tx(barrier, __popc(mask) * kPackedDataBytes);
  __syncwarp();  // the expected bytes before any copy completes
  if (active) ptx::cp_async_bulk_g2s(ptx::smem_address(&s.kv[buffer][row][0]), data, kPackedDataBytes, barrier);
  for (uint32_t zero = ~mask & ((1u << kRows) - 1); zero != 0; zero &= zero - 1) {
    const int r = pw * kRows + __ffs(zero) - 1;
    for (int byte = lane * 16; byte < kPackedDataBytes; byte += 32 * 16) {
      ptx::st_shared_zero16(ptx::smem_address(&s.kv[buffer][r][byte]));
    }
  }
  if (lane < kRows) {
#pragma unroll
    for (int t = 0; t < Traits::kScaleTiles; ++t) {
      const uint32_t byte = ((t < 4 ? scale_bytes.x : scale_bytes.y) >> (8 * (t % 4))) & 0xffu;
      s.scale_bits[buffer][t][row] = byte << 23;
    }
  }
  if (lane < kRows / 8) s.column_mask[buffer][pw * kRows / 8 + lane] = static_cast<uint8_t>(mask >> (8 * lane));
  // Every lane publishes its own scales, zeros and mask (a release arrival each).
  ptx::mbarrier_arrive(barrier);
}

// The token's chunks [first, first + count) by the producer warpgroup, each
// chunk's indices loaded a chunk ahead so that their latency hides behind
// the tile's wait. kIndexBeforeLens: the first chunk's indices load beside
// the lens (masked by them after), not after them (the split path, whose
// CTAs walk a chunk or two: one DRAM trip less before the first rows).
template <bool kIndexBeforeLens>
__device__ __forceinline__ void produce_chunks(Smem& s, const Params& p, int64_t token, int first, int count,
                                               bool count_out_of_range) {
  constexpr int kRows = Traits::kProducerRows;
  const int lane = threadIdx.x % 32;
  const int row = (threadIdx.x / 32 - Traits::kWarps) * kRows + lane % kRows;
  const int every = 1 << 30;  // a len above every width
  const int32_t early =
      kIndexBeforeLens && lane < kRows && count > 0 ? listed_index(p, token, first, row, every, every) : -1;
  const int swa_len = p.swa.lens ? p.swa.lens[token] : p.swa.width;
  const int extra_len = p.extra.lens ? p.extra.lens[token] : p.extra.width;
  int32_t index = -1;
  if constexpr (kIndexBeforeLens) {
    index = column_listed(p, first, row, swa_len, extra_len) ? early : -1;
  } else {
    index = lane < kRows && count > 0 ? listed_index(p, token, first, row, swa_len, extra_len) : -1;
  }
  for (int i = 0; i < count; ++i) {
    const int32_t next =
        i + 1 < count && lane < kRows ? listed_index(p, token, first + i + 1, row, swa_len, extra_len) : -1;
    produce_chunk(s, p, i, first + i, index, count_out_of_range);
    if (i == 0) ptx::launch_dependents();
    index = next;
  }
}

// ---- q ----

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

__device__ __forceinline__ QueryBlocks load_query(const Params& p, int64_t token, int first_head, int count) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = lane % Traits::kHeads, first_block = 4 * warp + 2 * (lane / Traits::kHeads);
  QueryBlocks q;
  if (head < count) {
    const uint4* src = reinterpret_cast<const uint4*>(p.q + token * p.q_token_stride +
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

__device__ __forceinline__ void convert_query(Smem& s, const QueryBlocks& q, float scale_log2) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = lane % Traits::kHeads, first_block = 4 * warp + 2 * (lane / Traits::kHeads);
  uint16_t v[2][16];
  float amax = 0.0f;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int piece = 0; piece < 2; ++piece) {
      const uint4 bits = q.bits[b][piece];
      const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        v[b][8 * piece + 2 * w] = static_cast<uint16_t>(words[w] & 0xffffu);
        v[b][8 * piece + 2 * w + 1] = static_cast<uint16_t>(words[w] >> 16);
      }
    }
#pragma unroll
    for (int d = 0; d < 16; ++d) amax = fmaxf(amax, fabsf(__uint_as_float(uint32_t{v[b][d]} << 16)));
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, Traits::kHeads));
  if (lane < Traits::kHeads) s.query_amax[warp][head] = amax;
  math_sync();
#pragma unroll
  for (int w = 0; w < Traits::kWarps; ++w) amax = fmaxf(amax, s.query_amax[w][head]);
  int shift = amax > 0.0f ? 14 - (static_cast<int>(__float_as_uint(amax) >> 23) - 127) : 0;
  shift = shift > 126 ? 126 : shift;
  const float factor = pow2(shift);
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const int block = first_block + b;
    auto value = [&](int d) { return __uint_as_float(uint32_t{v[b][d]} << 16) * factor; };
    uint32_t words[2][4];
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

// ---- S = Q K^T ----

// FP32 value of a row's scale: 2^(byte - 127); byte 0 is the subnormal 2^-127.
__device__ __forceinline__ float scale_value(uint32_t bits) { return __uint_as_float(bits != 0 ? bits : 0x00400000u); }

// Warpgroup g's share of S^T (64 columns x 16 heads) over score tiles 4g ..
// 4g + 3: tile j < 7 from the E4M3 bytes (two ldmatrix.x4 give its 4 FP16
// k-steps after an exact conversion), on its own accumulator, then times the
// rows' scales into the total; tile 7, the BF16 dims, as they are. Stored
// as scores[warpgroup][head][column].
__device__ __forceinline__ void score_chunk(Smem& s, int buffer) {
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  // ldmatrix.x4: matrices (rows 0-7, bytes 0-15), (rows 8-15, 0-15), (0-7, 16-31), (8-15, 16-31).
  const int row = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_base = ptx::smem_address(&s.kv[buffer][row][(lane >> 4) * 16]);
  const uint64_t q =
      ptx::wgmma_descriptor(ptx::smem_address(&s.q[0][0][0][0]), Traits::kCoreBytes, Traits::kQRowGroupBytes);
  const int column = 16 * warp + lane / 4;  // accumulator rows: column, column + 8
  const int first_tile = Traits::kTilesPerWarpgroup * warpgroup;
  // The next FP8 tile's bytes (two ldmatrix.x4), loaded while this tile's wgmmas run.
  uint32_t m[2][4];
  auto load_bytes = [&](int tile) {
    ptx::ldmatrix_x4(m[0], a_base + tile * kPackedTileDims);
    ptx::ldmatrix_x4(m[1], a_base + tile * kPackedTileDims + 32);
  };
  load_bytes(first_tile);
  float total[8];
#pragma unroll
  for (int j = 0; j < Traits::kTilesPerWarpgroup; ++j) {
    const int tile = first_tile + j;
    float acc[8];
    uint32_t a[Traits::kStepsPerTile][4];
    if (tile < Traits::kScaleTiles) {
#pragma unroll
      for (int k = 0; k < Traits::kStepsPerTile; ++k) {
        const uint32_t top = m[k / 2][2 * (k % 2)], bottom = m[k / 2][2 * (k % 2) + 1];
        a[k][0] = ptx::e4m3x2_to_f16x2<false>(top);
        a[k][1] = ptx::e4m3x2_to_f16x2<false>(bottom);
        a[k][2] = ptx::e4m3x2_to_f16x2<true>(top);
        a[k][3] = ptx::e4m3x2_to_f16x2<true>(bottom);
      }
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < Traits::kStepsPerTile; ++k) {
        const int block = tile * Traits::kStepsPerTile + k;
        ptx::wgmma_f16_64x16x16_rs(acc, a[k], ptx::wgmma_descriptor_advance(q, block * 2 * Traits::kCoreBytes), k > 0);
      }
      ptx::wgmma_commit();
      if (j + 1 < Traits::kTilesPerWarpgroup && tile + 1 < Traits::kScaleTiles) load_bytes(tile + 1);
      const uint32_t bits_top = s.scale_bits[buffer][tile][column];  // loaded while the wgmmas run
      const uint32_t bits_bottom = s.scale_bits[buffer][tile][column + 8];
      ptx::wgmma_wait_all();
      const float f_top = scale_value(bits_top), f_bottom = scale_value(bits_bottom);
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const float f = r % 4 < 2 ? f_top : f_bottom;
        total[r] = j == 0 ? acc[r] * f : __fmaf_rn(acc[r], f, total[r]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < Traits::kStepsPerTile; ++k) ptx::ldmatrix_x4(a[k], a_base + Traits::kTailByte + 32 * k);
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < Traits::kStepsPerTile; ++k) {
        const int block = Traits::kFp8Blocks + k;
        ptx::wgmma_bf16_64x16x16_rs(acc, a[k], ptx::wgmma_descriptor_advance(q, block * 2 * Traits::kCoreBytes),
                                    k > 0);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait_all();
#pragma unroll
      for (int r = 0; r < 8; ++r) total[r] += acc[r];
    }
  }
  // Fragment: rows column (+8), heads 8j + 2(lane % 4) (+1).
  float(&scores)[Traits::kHeads][Traits::kScoreRowFloats] = s.scores[warpgroup];
  const int head = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    scores[8 * j + head][column] = total[4 * j + 0];
    scores[8 * j + head + 1][column] = total[4 * j + 1];
    scores[8 * j + head][column + 8] = total[4 * j + 2];
    scores[8 * j + head + 1][column + 8] = total[4 * j + 3];
  }
}

// ---- softmax ----

// Online softmax over the chunk, 16 threads a head, 4 columns each: P in
// FP32 (the P V warps round it), the running statistics and the rescale
// factor of O.
__device__ __forceinline__ void softmax_chunk(Smem& s, int buffer, bool first) {
  constexpr int kColumns = Traits::kSoftmaxColumns;
  const int head = threadIdx.x / Traits::kSoftmaxThreads, part = threadIdx.x % Traits::kSoftmaxThreads;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask[buffer]) >> (part * kColumns);
  const float4 lo = *reinterpret_cast<const float4*>(&s.scores[0][head][part * kColumns]);
  const float4 hi = *reinterpret_cast<const float4*>(&s.scores[1][head][part * kColumns]);
  const float factor = s.score_factor[head];
  float v[kColumns] = {(lo.x + hi.x) * factor, (lo.y + hi.y) * factor, (lo.z + hi.z) * factor,
                       (lo.w + hi.w) * factor};
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kColumns; ++i) {
    if (!((mask >> i) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
#pragma unroll
  for (int offset = 1; offset < Traits::kSoftmaxThreads; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  const float old_max = first ? -INFINITY : s.running_max[head];
  const float old_sum = first ? 0.0f : s.running_sum[head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  // An active column's P is at least 2^-126 (a normal float: P V's keys
  // need its exponent); a masked column's is 0.
  auto probability = [&](int i) {
    return (mask >> i) & 1u ? fmaxf(ptx::exp2_approx(v[i] - base), kMinProbability) : 0.0f;
  };
  const float4 prob = make_float4(probability(0), probability(1), probability(2), probability(3));
  *reinterpret_cast<float4*>(&s.probs[head][part * kColumns]) = prob;
  float sum = (prob.x + prob.y) + (prob.z + prob.w);
#pragma unroll
  for (int offset = 1; offset < Traits::kSoftmaxThreads; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncwarp();  // every lane has read the old statistics
  if (part == 0) {
    const float rescale = ptx::exp2_approx(old_max - base);  // 0 while old_max is -inf
    s.rescale[head] = rescale;
    s.running_sum[head] = __fmaf_rn(old_sum, rescale, sum);
    s.running_max[head] = new_max;
  }
}

// ---- O = P V ----

// A warp's P V accumulator: its 64 dims of heads lane / 4 (values 0, 1)
// and lane / 4 + 8 (2, 3): [32-dim group][16-dim half][n-tile][4].
using DimFragment = float[2][2][2][4];

__device__ __forceinline__ void rescale_fragment(DimFragment& acc, float top, float bottom) {
#pragma unroll
  for (int g = 0; g < 2; ++g)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        acc[g][h][n][0] *= top, acc[g][h][n][1] *= top;
        acc[g][h][n][2] *= bottom, acc[g][h][n][3] *= bottom;
      }
}

// P V of scale tile w (warp w < 7, dims 64w .. 64w + 63). The weight of
// column c for head h is P[h][c] 2^(s[c] - 127); as bits, P's plus s << 23
// (the "key": P of an active column is a normal float, and a masked
// column has P = 0 and s = 0, so key 0), whose largest value gives the chunk's
// power-of-two unit of the head. The accumulator's unit E (O = acc 2^E)
// becomes E' = max(E + log2 of the rescale, chunk unit): acc is scaled by
// rescale * 2^(E - E') (below 2), and each weight enters as key - (E' + 127)
// << 23, a float below 2 (flushed to 0 under 2^-126: FP16 would lose it).
__device__ __forceinline__ void accumulate_scaled_tile(Smem& s, int buffer, DimFragment& acc, int (&unit)[2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // keys[k-step][head: top, bottom][columns 2t, 2t + 1 | 2t + 8, 2t + 9]
  uint32_t keys[4][2][4];
  uint32_t best[2] = {0, 0};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint2 scale_lo = *reinterpret_cast<const uint2*>(&s.scale_bits[buffer][warp][16 * kk + 2 * t]);
    const uint2 scale_hi = *reinterpret_cast<const uint2*>(&s.scale_bits[buffer][warp][16 * kk + 2 * t + 8]);
    const uint32_t shifts[4] = {scale_lo.x, scale_lo.y, scale_hi.x, scale_hi.y};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint2 p_lo = *reinterpret_cast<const uint2*>(&s.probs[g + 8 * h][16 * kk + 2 * t]);
      const uint2 p_hi = *reinterpret_cast<const uint2*>(&s.probs[g + 8 * h][16 * kk + 2 * t + 8]);
      const uint32_t bits[4] = {p_lo.x, p_lo.y, p_hi.x, p_hi.y};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        keys[kk][h][c] = bits[c] + shifts[c];
        best[h] = max(best[h], keys[kk][h][c]);
      }
    }
  }
  uint32_t floor_bits[2];
  float factor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    best[h] = max(best[h], __shfl_xor_sync(0xffffffffu, best[h], 1));
    best[h] = max(best[h], __shfl_xor_sync(0xffffffffu, best[h], 2));
    const float rescale = s.rescale[g + 8 * h];
    const int chunk_unit = static_cast<int>(best[h] >> 23) - 254;
    const int rescale_log2 = static_cast<int>(__float_as_uint(rescale) >> 23) - 127;
    // At least -127, so that a masked column's key 0 is below the floor.
    const int new_unit = max(max(unit[h] + rescale_log2, chunk_unit), -127);
    factor[h] = rescale * pow2(unit[h] - new_unit);
    floor_bits[h] = static_cast<uint32_t>(new_unit + 127) << 23;
    unit[h] = new_unit;
  }
  rescale_fragment(acc, factor[0], factor[1]);
  auto weight = [&](uint32_t key, int h) { return __int_as_float(max(static_cast<int>(key - floor_bits[h]), 0)); };
  const uint32_t v_base =
      ptx::smem_address(&s.kv[buffer][((lane >> 3) & 1) * 8 + (lane & 7)][(warp * 4 + (lane >> 4)) * 16]);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    // A fragment: (top, 2t..), (bottom, 2t..), (top, 2t+8..), (bottom, 2t+8..).
    const uint32_t a[4] = {ptx::half2_bits(weight(keys[kk][0][0], 0), weight(keys[kk][0][1], 0)),
                           ptx::half2_bits(weight(keys[kk][1][0], 1), weight(keys[kk][1][1], 1)),
                           ptx::half2_bits(weight(keys[kk][0][2], 0), weight(keys[kk][0][3], 0)),
                           ptx::half2_bits(weight(keys[kk][1][2], 1), weight(keys[kk][1][3], 1))};
#pragma unroll
    for (int dg = 0; dg < 2; ++dg) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kTileRowBytes + dg * 32);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // bytes (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
        const uint32_t rows_lo = __byte_perm(r[2 * half], 0, 0x3120);
        const uint32_t rows_hi = __byte_perm(r[2 * half + 1], 0, 0x3120);
        ptx::mma_f16_16x8x16(acc[dg][half][0], a, ptx::e4m3x2_to_f16x2<false>(rows_lo),
                             ptx::e4m3x2_to_f16x2<false>(rows_hi));
        ptx::mma_f16_16x8x16(acc[dg][half][1], a, ptx::e4m3x2_to_f16x2<true>(rows_lo),
                             ptx::e4m3x2_to_f16x2<true>(rows_hi));
      }
    }
  }
}

// P V of the BF16 dims (warp 7, dims 448..511): P as BF16 hi + lo (16
// significant bits), V by ldmatrix.trans from the tile as it is.
__device__ __forceinline__ void accumulate_tail(Smem& s, int buffer, DimFragment& acc) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  rescale_fragment(acc, s.rescale[g], s.rescale[g + 8]);
  const uint32_t v_base = ptx::smem_address(
      &s.kv[buffer][((lane >> 3) & 1) * 8 + (lane & 7)][Traits::kTailByte + (lane >> 4) * 16]);
  auto split = [](float2 p, uint32_t& hi, uint32_t& lo) {
    hi = ptx::bf16x2_bits(p.x, p.y);
    const float hx = __uint_as_float(hi << 16), hy = __uint_as_float(hi & 0xffff0000u);
    lo = ptx::bf16x2_bits(p.x - hx, p.y - hy);
  };
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t hi[4], lo[4];
    split(*reinterpret_cast<const float2*>(&s.probs[g][16 * kk + 2 * t]), hi[0], lo[0]);
    split(*reinterpret_cast<const float2*>(&s.probs[g + 8][16 * kk + 2 * t]), hi[1], lo[1]);
    split(*reinterpret_cast<const float2*>(&s.probs[g][16 * kk + 2 * t + 8]), hi[2], lo[2]);
    split(*reinterpret_cast<const float2*>(&s.probs[g + 8][16 * kk + 2 * t + 8]), hi[3], lo[3]);
#pragma unroll
    for (int dg = 0; dg < 2; ++dg)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kTileRowBytes + (4 * dg + 2 * half) * 16);
        ptx::mma_bf16_16x8x16(acc[dg][half][0], lo, r[0], r[1]);
        ptx::mma_bf16_16x8x16(acc[dg][half][1], lo, r[2], r[3]);
        ptx::mma_bf16_16x8x16(acc[dg][half][0], hi, r[0], r[1]);
        ptx::mma_bf16_16x8x16(acc[dg][half][1], hi, r[2], r[3]);
      }
  }
}

// ---- output ----

// Softmax statistics of one head: the running max (log2 domain) and sum.
struct HeadStats {
  float max;
  float sum;
};

// One head's values of one 16-dim half of one 32-dim group of warp `warp`'s
// dims: v = (n-tile 0's two values of the head, n-tile 1's two), times
// `scale` and 2^e (scale tiles: e in two factors, so that it reaches below
// 2^-126), as BF16.
__device__ __forceinline__ void store_head_slice(uint16_t* out, int warp, int t, int dg, int half, float4 v,
                                                 float scale, int e) {
  if (warp < Traits::kScaleTiles) {
    const float scale_a = pow2(e / 2), scale_b = pow2(e - e / 2);
    auto value = [&](float x) { return x * scale * scale_a * scale_b; };
    // n-tile (half, n) column j is dim 16 half + 2j + n: this thread has dims 4t .. 4t + 3.
    *reinterpret_cast<uint2*>(out + warp * kPackedTileDims + 32 * dg + 16 * half + 4 * t) =
        make_uint2(ptx::bf16x2_bits(value(v.x), value(v.z)), ptx::bf16x2_bits(value(v.y), value(v.w)));
  } else {
    // n-tile n column j is dim 16 half + 8n + j: this thread has 2t, 2t + 1 of each.
    uint16_t* dims = out + kPackedFp8Dims + 32 * dg + 16 * half + 2 * t;
    *reinterpret_cast<uint32_t*>(dims) = ptx::bf16x2_bits(v.x * scale, v.y * scale);
    *reinterpret_cast<uint32_t*>(dims + 8) = ptx::bf16x2_bits(v.z * scale, v.w * scale);
  }
}

// Head h's (0: lane / 4, 1: lane / 4 + 8) values of a (32-dim group, 16-dim
// half) of the fragment, in store_head_slice's order.
__device__ __forceinline__ float4 head_slice(const DimFragment& acc, int dg, int half, int h) {
  const float(&even)[4] = acc[dg][half][0];
  const float(&odd)[4] = acc[dg][half][1];
  return h == 0 ? make_float4(even[0], even[1], odd[0], odd[1]) : make_float4(even[2], even[3], odd[2], odd[3]);
}

// The factor on a head's values: 1 / (sum + its sink's weight), 0 without an
// active column; stores the head's lse (natural log, sink excluded) where `lse` is given.
__device__ __forceinline__ float head_output_scale(const HeadStats& stats, float sink_log2, float* lse) {
  const bool none = stats.max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  if (lse) *lse = none ? -INFINITY : (stats.max + __log2f(stats.sum)) * kLn2;
  return none ? 0.0f : 1.0f / (stats.sum + ptx::exp2_approx(sink_log2 - stats.max));
}

// The unit exponent a head's values are stored with (2^e), clamped where
// the BF16 output is 0 anyway.
__device__ __forceinline__ int output_exponent(int unit) { return unit < -300 ? -300 : unit; }

// Warp `warp`'s dims of its heads h_begin .. h_end - 1 (0: lane / 4, 1: lane /
// 4 + 8; stats[h] theirs), over the softmax sum and the sink (sink_log2(head)),
// as BF16; lse from warp 0.
template <class SinkLog2>
__device__ __forceinline__ void store_warp_output(const Params& p, int64_t token, int first_head, int count,
                                                  int warp, const DimFragment& acc, const int (&unit)[2],
                                                  const HeadStats (&stats)[2], int h_begin, int h_end,
                                                  SinkLog2&& sink_log2) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  uint16_t* out_token = p.out + token * p.out_token_stride + first_head * p.out_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = g + 8 * h;
    if (h < h_begin || h >= h_end || head >= count) continue;  // H = 8: the padded rows
    float* lse = p.lse && warp == 0 && t == 0 ? p.lse + token * p.lse_token_stride + first_head + head : nullptr;
    const float scale = head_output_scale(stats[h], sink_log2(head), lse);
    uint16_t* out = out_token + head * p.out_head_stride;
#pragma unroll
    for (int dg = 0; dg < 2; ++dg)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        store_head_slice(out, warp, t, dg, half, head_slice(acc, dg, half, h), scale, output_exponent(unit[h]));
      }
  }
}

// This warp's dims, the sinks from shared memory (store_warp_output).
__device__ __forceinline__ void store_output(const Smem& s, const Params& p, int64_t token, int first_head,
                                             int count, const DimFragment& acc, const int (&unit)[2],
                                             const HeadStats (&stats)[2], int h_begin, int h_end) {
  store_warp_output(p, token, first_head, count, static_cast<int>(threadIdx.x / 32), acc, unit, stats, h_begin, h_end,
                    [&](int head) { return s.sink_log2[head]; });
}

// A share's scale unit plus its weight's exponent (kNoUnit for weight 0):
// the larger of two sets their common unit when they are folded, so that
// the share that dominates keeps its bits.
__device__ __forceinline__ int weighted_unit(int unit, float weight) {
  return weight > 0.0f ? unit + static_cast<int>(__float_as_uint(weight) >> 23) - 127 : kNoUnit;
}

// Two CTAs a unit, after both walks: CTA r stores heads lane / 4 + 8 r of
// every thread's dims. Each thread sends the other head's P V values, its
// scale unit and (threads < 16) every head's statistics into the peer's
// exchange area by st.async, each store completing its bytes on the peer's
// exchange_landed barrier (send_to_peer); once its own barrier completes,
// each CTA folds the peer's share into its own, rank 0's share first
// (fold_pair), and returns the statistics of the head it stores in `stats`.
__device__ __forceinline__ void send_to_peer(Smem& s, const DimFragment& acc, const int (&unit)[2], uint32_t rank) {
  const int tid = threadIdx.x, warp = tid / 32;
  const int send = 1 - static_cast<int>(rank);  // the head half the peer stores
  const uint32_t peer = rank ^ 1u;
  const uint32_t values = ptx::map_to_peer(ptx::smem_address(&s.exchange.values[tid][0]), peer);
  const uint32_t landed = ptx::map_to_peer(ptx::smem_address(&s.exchange_landed), peer);
#pragma unroll
  for (int dg = 0; dg < 2; ++dg)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int slot = 8 * dg + 4 * half + 2 * n;
        const float(&a)[4] = acc[dg][half][n];  // select, not index: the fragment stays in registers
        ptx::st_async_peer(values + 4 * slot, make_float2(send == 0 ? a[0] : a[2], send == 0 ? a[1] : a[3]), landed);
      }
  const int my_unit = warp >= Traits::kScaleTiles ? 0 : send == 0 ? unit[0] : unit[1];
  ptx::st_async_peer(ptx::map_to_peer(ptx::smem_address(&s.exchange.scale_unit[tid]), peer),
                     static_cast<uint32_t>(my_unit), landed);
  if (tid < Traits::kHeads) {
    ptx::st_async_peer(ptx::map_to_peer(ptx::smem_address(&s.exchange.stats[tid]), peer),
                       make_float2(s.running_max[tid], s.running_sum[tid]), landed);
  }
}

__device__ __forceinline__ void fold_pair(const Smem& s, DimFragment& acc, int (&unit)[2], HeadStats (&stats)[2],
                                          uint32_t rank) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int keep = static_cast<int>(rank);
  const int head = lane / 4 + 8 * keep;
  const float own_max = s.running_max[head], own_sum = s.running_sum[head];
  const float2 peer_stats = s.exchange.stats[head];
  const float joint_max = fmaxf(own_max, peer_stats.x);
  const float own_weight = own_max == -INFINITY ? 0.0f : ptx::exp2_approx(own_max - joint_max);
  const float peer_weight = peer_stats.x == -INFINITY ? 0.0f : ptx::exp2_approx(peer_stats.x - joint_max);
  // Rank 0's share first, in both CTAs.
  const float first_sum = rank == 0 ? own_sum * own_weight : peer_stats.y * peer_weight;
  const float second_sum = rank == 0 ? peer_stats.y * peer_weight : own_sum * own_weight;
  (keep == 0 ? stats[0] : stats[1]) = HeadStats{joint_max, first_sum + second_sum};
  float own_factor = own_weight, peer_factor = peer_weight;  // the BF16 dims (warp 7) carry no unit
  if (warp < Traits::kScaleTiles) {
    // The common unit comes from the larger weighted share (unit plus the
    // weight's exponent), so that the share that dominates keeps its bits
    // even when the other half's unit is far above it.
    const int own_unit = keep == 0 ? unit[0] : unit[1];
    const int peer_unit = s.exchange.scale_unit[tid];
    const int common = max(max(weighted_unit(own_unit, own_weight), weighted_unit(peer_unit, peer_weight)), -127);
    own_factor = own_weight > 0.0f ? own_weight * pow2(own_unit - common) : 0.0f;
    peer_factor = peer_weight > 0.0f ? peer_weight * pow2(peer_unit - common) : 0.0f;
    if (keep == 0) {
      unit[0] = common;
    } else {
      unit[1] = common;
    }
  }
  const float* received = s.exchange.values[tid];
#pragma unroll
  for (int dg = 0; dg < 2; ++dg)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          float& value = keep == 0 ? acc[dg][half][n][v] : acc[dg][half][n][2 + v];
          const float own = value * own_factor;
          const float other = received[8 * dg + 4 * half + 2 * n + v] * peer_factor;
          value = rank == 0 ? own + other : other + own;
        }
}

// ---- the split path: shares in the workspace, then the combine kernel ----

using Workspace = SplitWorkspace;

__device__ __forceinline__ uint8_t* share_record(const Params& p, int64_t share) {
  return p.workspace + share * Workspace::kShareBytes;
}

// After the walk: this math thread's P V values and scale units, and (threads
// < 16) the heads' statistics, into share `share` (SplitWorkspace).
__device__ __forceinline__ void write_share(const Smem& s, const Params& p, int64_t share,
                                            const DimFragment& acc, const int (&unit)[2]) {
  uint8_t* record = share_record(p, share);
  float4* values = reinterpret_cast<float4*>(record);
  int32_t* units = reinterpret_cast<int32_t*>(record + Workspace::kValueBytes);
  const int tid = threadIdx.x, warp = tid / 32;
#pragma unroll
  for (int dg = 0; dg < 2; ++dg)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int h = 0; h < 2; ++h) values[((2 * dg + half) * 2 + h) * Traits::kThreads + tid] = head_slice(acc, dg, half, h);
  // The BF16 dims (warp 7) carry no unit.
  units[tid] = warp < Traits::kScaleTiles ? unit[0] : 0;
  units[Traits::kThreads + tid] = warp < Traits::kScaleTiles ? unit[1] : 0;
  if (tid < Traits::kHeads) {
    reinterpret_cast<float2*>(record + Workspace::kValueBytes + Workspace::kUnitBytes)[tid] =
        make_float2(s.running_max[tid], s.running_sum[tid]);
  }
}

// One (token, head group) unit's warp `blockIdx.x % 8` a CTA: thread (h,
// slice, lane) folds head lane / 4 + 8h of walker thread (warp, lane)'s
// slice over the unit's shares in rank order (as the pair folds its two
// halves: weights against the joint max, a common scale unit from the larger
// weighted share), then stores it as the stream kernel does.
// kMax >= p.split_ctas bounds the shares loaded at once (its registers: a
// combine CTA that holds fewer leaves room for split CTAs on its SM while it
// waits for them under PDL).
template <int kMax>
__global__ void __launch_bounds__(Workspace::kCombineThreads) combine_kernel(const __grid_constant__ Params p) {
  static_assert(kMax <= Workspace::kMaxShares, "at most kMaxShares shares a unit");
  const int head_groups = (p.num_heads + Traits::kHeads - 1) / Traits::kHeads;
  const int64_t unit_index = blockIdx.x / Traits::kWarps;
  const int warp = static_cast<int>(blockIdx.x % Traits::kWarps);
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * Traits::kHeads;
  const int count = min(Traits::kHeads, p.num_heads - first_head);
  const int lane = threadIdx.x % 32, slice = (threadIdx.x / 32) % Workspace::kSlices;
  const int h = threadIdx.x / (32 * Workspace::kSlices);
  const int head = lane / 4 + 8 * h, walker = warp * 32 + lane;
  const float sink_log2 = p.sinks && head < count ? p.sinks[first_head + head] * kLog2e : -INFINITY;
  ptx::grid_dependency_wait();  // the split kernel's shares are complete and visible
  ptx::launch_dependents();
  if (head >= count) return;  // H = 8: the padded rows

  // Every share's values, unit and statistics load at once. With kMax
  // shares (exact) every load is used; with fewer, shares past the unit's
  // load share 0 again and are not used, and the loads are volatile: ptxas
  // sank plain ones into the fold's per-share branches, one L2 round trip a
  // share. The units are volatile either way (their uses sit in the `scaled`
  // branch); each thread loads its own, so no L1 reuse is lost.
  const int shares = p.split_ctas;
  const auto fold = [&](auto exact) {
    constexpr bool kExact = decltype(exact)::value;
    const int share_count = kExact ? kMax : shares;
    float4 values[kMax];
    int units[kMax];
    float2 stats[kMax];
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      const uint8_t* record = share_record(p, unit_index * shares + (r < share_count ? r : 0));
      const float4* value = &reinterpret_cast<const float4*>(record)[(slice * 2 + h) * Traits::kThreads + walker];
      const int32_t* unit_of =
          &reinterpret_cast<const int32_t*>(record + Workspace::kValueBytes)[h * Traits::kThreads + walker];
      const float2* stat =
          &reinterpret_cast<const float2*>(record + Workspace::kValueBytes + Workspace::kUnitBytes)[head];
      values[r] = kExact ? *value : ptx::load_l2(value);
      units[r] = ptx::load_l2(unit_of);
      stats[r] = kExact ? *stat : ptx::load_l2(stat);
    }
    const bool scaled = warp < Traits::kScaleTiles;  // the BF16 dims (warp 7) carry no unit
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int unit = kNoUnit;
    HeadStats total{-INFINITY, 0.0f};
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
      if (r >= share_count) break;
      const float joint_max = fmaxf(total.max, stats[r].x);
      const float own_weight = total.max == -INFINITY ? 0.0f : ptx::exp2_approx(total.max - joint_max);
      const float share_weight = stats[r].x == -INFINITY ? 0.0f : ptx::exp2_approx(stats[r].x - joint_max);
      total = HeadStats{joint_max, total.sum * own_weight + stats[r].y * share_weight};
      float own_factor = own_weight, share_factor = share_weight;
      if (scaled) {
        const int common = max(max(weighted_unit(unit, own_weight), weighted_unit(units[r], share_weight)), -127);
        own_factor = own_weight > 0.0f ? own_weight * pow2(unit - common) : 0.0f;
        share_factor = share_weight > 0.0f ? share_weight * pow2(units[r] - common) : 0.0f;
        unit = common;
      }
      o.x = o.x * own_factor + values[r].x * share_factor, o.y = o.y * own_factor + values[r].y * share_factor;
      o.z = o.z * own_factor + values[r].z * share_factor, o.w = o.w * own_factor + values[r].w * share_factor;
    }
    float* lse = p.lse && warp == 0 && slice == 0 && lane % 4 == 0
                     ? p.lse + token * p.lse_token_stride + first_head + head
                     : nullptr;
    const float scale = head_output_scale(total, sink_log2, lse);
    uint16_t* out = p.out + token * p.out_token_stride + (first_head + head) * p.out_head_stride;
    store_head_slice(out, warp, lane % 4, slice / 2, slice % 2, o, scale, output_exponent(unit));
  };
  if (shares == kMax) {
    fold(std::true_type{});
  } else {
    fold(std::false_type{});
  }
}

// ---- the kernel ----

// kUnitCtas CTAs a (token, 16-head group) unit: 1, or 2 (a cluster; CTA r
// walks the r-th half of the chunks, and the pair combines through DSMEM),
// or 0: the split path, p.split_ctas CTAs a unit (CTA r the r-th run of
// chunks), each writing its share to the workspace for combine_kernel.
template <int kUnitCtas>
__global__ void __launch_bounds__(Traits::kLaunchThreads, Traits::kCtasPerSm)
    stream_kernel(const __grid_constant__ Params p) {
  static_assert(kUnitCtas == 0 || kUnitCtas == 1 || kUnitCtas == 2, "the split path, one CTA a unit, or a pair");
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const int head_groups = (p.num_heads + Traits::kHeads - 1) / Traits::kHeads;
  const int unit_ctas = kUnitCtas == 0 ? p.split_ctas : kUnitCtas;
  const int64_t unit_index = blockIdx.x / unit_ctas;
  const uint32_t rank = kUnitCtas == 1 ? 0u : blockIdx.x % unit_ctas;
  const int64_t token = unit_index / head_groups;
  const int first_head = static_cast<int>(unit_index % head_groups) * Traits::kHeads;
  const int count = min(Traits::kHeads, p.num_heads - first_head);
  const int tid = threadIdx.x, warp = tid / 32;
  const int chunks = p.swa.chunks + p.extra.chunks;
  const int per_cta = (chunks + unit_ctas - 1) / unit_ctas;
  const int first_chunk = min(static_cast<int>(rank) * per_cta, chunks);
  const int walk = min(per_cta, chunks - first_chunk);

  instrument::phase_span(0);  // diagnostic build only (phase-clocks): 0 entry, 1 math warps' start, 2 q converted,
                  // 3 first rows landed, 4 walk end, 5 results stored
  // Sinks are weights: read before the grid dependency wait (PDL).
  const float sink = p.sinks && tid < count ? p.sinks[first_head + tid] : -INFINITY;
  if (tid == 0) {  // one thread: racecheck attributes a warp's divergent mbarrier inits to another lane
#pragma unroll
    for (int b = 0; b < Traits::kBuffers; ++b) {
      ptx::mbarrier_init(ptx::smem_address(&s.rows_landed[b]), Traits::kRowsLandedArrivals);
    }
    if constexpr (kUnitCtas == 2) {  // the peer's share lands here after the walks
      ptx::mbarrier_init(ptx::smem_address(&s.exchange_landed), 1);
      ptx::mbarrier_arrive_expect_tx(ptx::smem_address(&s.exchange_landed), kPairExchangeBytes);
    }
  }
  __syncthreads();
  ptx::grid_dependency_wait();
  if (warp >= Traits::kWarps) {
    ptx::setmaxnreg_dec<Traits::kProducerRegisters>();
    produce_chunks<kUnitCtas == 0>(s, p, token, first_chunk, walk, p.out_of_range_count && first_head == 0);
    if constexpr (kUnitCtas == 2) {  // the producers take part in the barrier after the walks
      ptx::cluster_arrive_relaxed();
      ptx::cluster_wait();
    }
    return;
  }
  ptx::setmaxnreg_inc<Traits::kMathRegisters>();
  instrument::phase_span(1);
  const QueryBlocks query = load_query(p, token, first_head, count);
  if (tid < Traits::kHeads) {
    s.sink_log2[tid] = sink * kLog2e;
    s.running_max[tid] = -INFINITY;  // a CTA without chunks (one chunk a unit)
    s.running_sum[tid] = 0.0f;
  }
  convert_query(s, query, p.scale_log2);
  instrument::phase_span(2);

  DimFragment acc = {};
  int unit[2] = {kNoUnit, kNoUnit};
  for (int i = 0; i < walk; ++i) {
    const int buffer = i % Traits::kBuffers;
    ptx::mbarrier_wait_parity(ptx::smem_address(&s.rows_landed[buffer]), (i / Traits::kBuffers) & 1);
    if (i == 0) instrument::phase_span(3);
    score_chunk(s, buffer);
    math_sync();
    softmax_chunk(s, buffer, i == 0);
    math_sync();
    if (warp < Traits::kScaleTiles) {
      accumulate_scaled_tile(s, buffer, acc, unit);
    } else {
      accumulate_tail(s, buffer, acc);
    }
    // The warp's reads of the tile are done: the producers may refill it.
    if (i + Traits::kBuffers < walk) {
      ptx::named_barrier_arrive(Traits::kTileFreeBarrier + buffer, Traits::kLaunchThreads);
    }
  }
  instrument::phase_span(4);
  HeadStats stats[2];
  if constexpr (kUnitCtas == 0) {
    write_share(s, p, unit_index * unit_ctas + rank, acc, unit);
  } else if constexpr (kUnitCtas == 1) {
    const int g = tid % 32 / 4;
    stats[0] = HeadStats{s.running_max[g], s.running_sum[g]};
    stats[1] = HeadStats{s.running_max[g + 8], s.running_sum[g + 8]};
    store_output(s, p, token, first_head, count, acc, unit, stats, 0, 2);
  } else {
    // Both walks are done: every read of the tiles has fed an MMA, and the
    // exchange barrier was fenced at its initialization, so a relaxed
    // barrier frees the tiles for the exchange.
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait();
    send_to_peer(s, acc, unit, rank);
    ptx::mbarrier_wait_parity_cluster(ptx::smem_address(&s.exchange_landed), 0);  // the peer's share has landed
    fold_pair(s, acc, unit, stats, rank);
    store_output(s, p, token, first_head, count, acc, unit, stats, static_cast<int>(rank), static_cast<int>(rank) + 1);
  }
  instrument::phase_span(5);
}

}  // namespace sparse_decode::dsv4_packed::stream
