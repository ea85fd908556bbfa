// The packed-row kernel of dsv4_decode_packed: one thread-block cluster a
// (token, group of 16 heads), one CTA a run of 64-column chunks (the SWA
// segment's chunks, then the extra segment's). Rows are gathered with
// cp.async, their FP8 tiles dequantized to BF16 in shared memory, scored and
// multiplied with BF16 mma.sync; the CTAs' partial results are combined
// through distributed shared memory. docs/kernels/packed.md explains it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "common/ptx_packed.cuh"
#include "dsv4/packed_params.h"
#include "dsv4/packed_traits.cuh"

namespace sparse_decode::dsv4::packed {

using Traits = PackedTraits;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Gathers the chunk's rows: warp w takes rows 8w..8w+7. Lanes 0..7 load
// one index each; every lane then copies 9 of the warp's 8 x 36 16-byte
// pieces (FP8 bytes to the staging area, BF16 dims straight to the tile) and
// lanes 0..7 their row's scale bytes. Masked columns read nothing and are
// zero-filled (scale byte 0 and FP8 0 dequantize to 0), so NaN in their rows
// never reaches an MMA.
__device__ __forceinline__ void gather_chunk(PackedSmem& s, const PackedSegmentParams& seg, int64_t token,
                                             int column0, int len, bool count_out_of_range,
                                             int32_t* out_of_range_count) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int column = column0 + warp * Traits::kGatherRowsPerWarp + lane;
  bool active = false;
  const uint8_t* data = seg.pool;
  const uint8_t* scales = seg.pool;
  if (lane < Traits::kGatherRowsPerWarp && column < seg.width && column < len) {
    const int32_t index = seg.indices[token * seg.indices_stride + column];
    active = index >= 0 && index < seg.rows;
    if (index >= 0 && !active && count_out_of_range && out_of_range_count) atomicAdd(out_of_range_count, 1);
    if (active) {
      const uint32_t page = static_cast<uint32_t>(index) / seg.page_size;
      const uint32_t slot = static_cast<uint32_t>(index) - page * seg.page_size;
      const uint8_t* page_base = seg.pool + page * seg.page_stride;
      data = page_base + slot * int64_t{kPackedDataBytes};
      scales = page_base + seg.scale_offset + slot * int64_t{kPackedScaleBytes};
    }
  }
  const uint32_t mask = __ballot_sync(0xffffffffu, active);
  if (lane == 0) s.column_mask[warp] = static_cast<uint8_t>(mask);
  const int row0 = warp * Traits::kGatherRowsPerWarp;
#pragma unroll
  for (int i = 0; i < Traits::kGatherRowsPerWarp * Traits::kRowPieces / 32; ++i) {
    const int item = i * 32 + lane;
    const int r = item / Traits::kRowPieces, piece = item % Traits::kRowPieces;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(data), r));
    const bool load = (mask >> r) & 1u;
    const uint32_t dst = piece < Traits::kFp8Pieces
                             ? ptx::smem_address(&s.raw.fp8[row0 + r][piece * 16])
                             : ptx::smem_address(&s.kv[row0 + r][kPackedFp8Dims + (piece - Traits::kFp8Pieces) * 8]);
    ptx::cp_async_16(dst, load ? src + piece * 16 : seg.pool, load ? 16u : 0u);
  }
  if (lane < Traits::kGatherRowsPerWarp) {
    ptx::cp_async_8(ptx::smem_address(&s.raw.scales[row0 + lane][0]), scales, active ? 8u : 0u);
  }
}

// FP8 bytes times their tile's UE8M0 scale, to BF16 in the tile: exact (an
// E4M3 value has 4 significant bits, BF16 8) except below BF16's subnormal
// range. Thread t converts 8 bytes at a time, consecutive threads
// consecutive bytes of a row.
__device__ __forceinline__ void dequantize_chunk(PackedSmem& s) {
  constexpr int kSteps = Traits::kChunkColumns * Traits::kGroupsPerRow / Traits::kThreads;
  static_assert(kSteps * Traits::kThreads == Traits::kChunkColumns * Traits::kGroupsPerRow, "whole steps");
#pragma unroll 2
  for (int i = 0; i < kSteps; ++i) {
    const int item = i * Traits::kThreads + threadIdx.x;
    const int row = item / Traits::kGroupsPerRow, group = item % Traits::kGroupsPerRow;
    const uint2 bytes = *reinterpret_cast<const uint2*>(&s.raw.fp8[row][group * 8]);
    const uint32_t byte = s.raw.scales[row][group * 8 / kPackedTileDims];
    // 2^(byte - 127) as a float: byte 0 is the subnormal 2^-127.
    const float scale = __uint_as_float(byte == 0 ? 0x00400000u : byte << 23);
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = j < 2 ? bytes.x : bytes.y;
      const __half2_raw halves =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * (j % 2))), __NV_E4M3);
      const float2 values = __half22float2(*reinterpret_cast<const __half2*>(&halves));
      packed[j] = bf16x2_bits(values.x * scale, values.y * scale);
    }
    *reinterpret_cast<uint4*>(&s.kv[row][group * 8]) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// S = Q K^T for the warp's 8 columns over all 512 dims (32 k16 steps on 4
// accumulators, summed in a fixed order), stored as scores[head][column].
__device__ __forceinline__ void score_chunk(PackedSmem& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t q_base = ptx::smem_address(&s.q[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  const uint32_t k_base = ptx::smem_address(&s.kv[warp * Traits::kColumnsPerWarp + (lane & 7)][(lane >> 3) * 8]);
  float acc[4][4] = {};
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 32; ++kk) {
    uint32_t a0[4], a1[4], b[4];
    ptx::ldmatrix_x4(a0, q_base + kk * 64);
    ptx::ldmatrix_x4(a1, q_base + kk * 64 + 32);
    ptx::ldmatrix_x4(b, k_base + kk * 64);
    ptx::mma_bf16_16x8x16(acc[(2 * kk) % 4], a0, b[0], b[1]);
    ptx::mma_bf16_16x8x16(acc[(2 * kk + 1) % 4], a1, b[2], b[3]);
  }
  const int head = lane / 4, column = warp * Traits::kColumnsPerWarp + 2 * (lane % 4);
  float d[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
  *reinterpret_cast<float2*>(&s.soft.scores[head][column]) = make_float2(d[0], d[1]);
  *reinterpret_cast<float2*>(&s.soft.scores[head + 8][column]) = make_float2(d[2], d[3]);
}

// Online softmax over the chunk in the log2 domain: 16 threads a head, 4
// columns each. P goes to P V as hi + lo, two BF16 values (16 significant
// bits): BF16 alone would cost up to 3.6e-3 of relative error where the
// weighted rows cancel.
__device__ __forceinline__ void softmax_chunk(PackedSmem& s, float scale_log2) {
  const int head = threadIdx.x / 16, part = threadIdx.x % 16;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask) >> (part * 4);
  const float4 raw = *reinterpret_cast<const float4*>(&s.soft.scores[head][part * 4]);
  float v[4] = {raw.x * scale_log2, raw.y * scale_log2, raw.z * scale_log2, raw.w * scale_log2};
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (!((mask >> i) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
#pragma unroll
  for (int offset = 1; offset < 16; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  const float old_max = s.running_max[head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  float prob[4], sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) prob[i] = ptx::exp2_approx(v[i] - base), sum += prob[i];
  const __nv_bfloat162 hi01 = __floats2bfloat162_rn(prob[0], prob[1]), hi23 = __floats2bfloat162_rn(prob[2], prob[3]);
  const float2 h01 = __bfloat1622float2(hi01), h23 = __bfloat1622float2(hi23);
  const __nv_bfloat162 lo01 = __floats2bfloat162_rn(prob[0] - h01.x, prob[1] - h01.y);
  const __nv_bfloat162 lo23 = __floats2bfloat162_rn(prob[2] - h23.x, prob[3] - h23.y);
  *reinterpret_cast<uint2*>(&s.soft.probs_hi[head][part * 4]) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&hi01), *reinterpret_cast<const uint32_t*>(&hi23));
  *reinterpret_cast<uint2*>(&s.soft.probs_lo[head][part * 4]) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&lo01), *reinterpret_cast<const uint32_t*>(&lo23));
#pragma unroll
  for (int offset = 1; offset < 16; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (part == 0) {
    const float factor = ptx::exp2_approx(old_max - base);  // 0 while old_max is -inf
    s.rescale[head] = factor;
    s.running_sum[head] = s.running_sum[head] * factor + sum;
    s.running_max[head] = new_max;
  }
}

// O += P V for the warp's 64 dims: V's B fragments by ldmatrix.trans from
// the [column][dim] tile. acc[j] is the n8 tile of dims 64 warp + 8 j:
// [0], [1] head lane / 4, [2], [3] head lane / 4 + 8, dims 2 (lane % 4) + 0, 1.
__device__ __forceinline__ void accumulate_chunk(PackedSmem& s, float (&acc)[8][4], bool rescale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (rescale) {
    const float top = s.rescale[lane / 4], bottom = s.rescale[lane / 4 + 8];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] *= top, acc[j][1] *= top, acc[j][2] *= bottom, acc[j][3] *= bottom;
  }
  const int fragment_row = (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t hi_base = ptx::smem_address(&s.soft.probs_hi[fragment_row][(lane >> 4) * 8]);
  const uint32_t lo_base = ptx::smem_address(&s.soft.probs_lo[fragment_row][(lane >> 4) * 8]);
  const uint32_t v_base = ptx::smem_address(&s.kv[fragment_row][warp * Traits::kDimsPerWarp + (lane >> 4) * 8]);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t hi[4], lo[4];
    ptx::ldmatrix_x4(hi, hi_base + kk * 32);
    ptx::ldmatrix_x4(lo, lo_base + kk * 32);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_base + kk * 16 * Traits::kTileStride * 2 + j * 32);
      ptx::mma_bf16_16x8x16(acc[2 * j], lo, b[0], b[1]);
      ptx::mma_bf16_16x8x16(acc[2 * j + 1], lo, b[2], b[3]);
      ptx::mma_bf16_16x8x16(acc[2 * j], hi, b[0], b[1]);
      ptx::mma_bf16_16x8x16(acc[2 * j + 1], hi, b[2], b[3]);
    }
  }
}

// Combines the cluster's partial results for this CTA's share of the
// output: granules (4 dims) g with g % ctas == rank, every head. Peers are
// summed in rank order (the same order every run: bitwise reproducible).
__device__ __forceinline__ void reduce_owned(const PackedSmem& s, const PackedParams& p, int64_t token, int head0,
                                             int rank, int ctas, float sink_log2) {
  constexpr int kHeads = Traits::kHeads;
  const int h = threadIdx.x % kHeads;
  const uint32_t max_addr = ptx::smem_address(&s.running_max[h]);
  const uint32_t sum_addr = ptx::smem_address(&s.running_sum[h]);
  float peer_max[Traits::kMaxClusterCtas], peer_sum[Traits::kMaxClusterCtas];
  float cluster_max = -INFINITY;
#pragma unroll
  for (int c = 0; c < Traits::kMaxClusterCtas; ++c) {
    peer_max[c] = c < ctas ? ptx::ld_peer_f32(ptx::map_to_peer(max_addr, c)) : -INFINITY;
    peer_sum[c] = c < ctas ? ptx::ld_peer_f32(ptx::map_to_peer(sum_addr, c)) : 0.0f;
    cluster_max = fmaxf(cluster_max, peer_max[c]);
  }
  float weight[Traits::kMaxClusterCtas], sum = 0.0f;
#pragma unroll
  for (int c = 0; c < Traits::kMaxClusterCtas; ++c) {
    weight[c] = peer_max[c] == -INFINITY ? 0.0f : ptx::exp2_approx(peer_max[c] - cluster_max);
    sum += weight[c] * peer_sum[c];
  }
  const bool none = cluster_max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  const float scale = none ? 0.0f : 1.0f / (sum + ptx::exp2_approx(sink_log2 - cluster_max));
  const int head = head0 + h;
  if (head >= p.num_heads) return;
  if (rank == 0 && threadIdx.x < kHeads && p.lse) {
    p.lse[token * p.lse_token_stride + head] = none ? -INFINITY : (cluster_max + __log2f(sum)) * kLn2;
  }
  uint16_t* out = p.out + token * p.out_token_stride + head * p.out_head_stride;
  const int owned = (Traits::kGranules - rank + ctas - 1) / ctas;
  for (int local = threadIdx.x / kHeads; local < owned; local += Traits::kThreads / kHeads) {
    const int granule = local * ctas + rank;
    const uint32_t addr = ptx::smem_address(&s.partial[h][granule * 4]);
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < Traits::kMaxClusterCtas; ++c) {
      if (c >= ctas || weight[c] == 0.0f) continue;  // no active column there (its O is 0)
      const float4 v = ptx::ld_peer_f32x4(ptx::map_to_peer(addr, c));
      o.x += weight[c] * v.x, o.y += weight[c] * v.y, o.z += weight[c] * v.z, o.w += weight[c] * v.w;
    }
    *reinterpret_cast<uint2*>(out + granule * 4) =
        make_uint2(bf16x2_bits(o.x * scale, o.y * scale), bf16x2_bits(o.z * scale, o.w * scale));
  }
}

__global__ void __launch_bounds__(Traits::kThreads, 2) packed_kernel(const __grid_constant__ PackedParams p) {
  constexpr int kHeads = Traits::kHeads;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  PackedSmem& s = *reinterpret_cast<PackedSmem*>(smem_bytes);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int ctas = static_cast<int>(ptx::cluster_nctarank());
  const int64_t token = blockIdx.x / ctas;
  const int head0 = blockIdx.y * kHeads;
  const int tid = threadIdx.x;

  // Sinks are weights, not outputs of the previous kernel: loaded before the dependency wait.
  const float sink_log2 = p.sinks && head0 + tid % kHeads < p.num_heads ? p.sinks[head0 + tid % kHeads] * kLog2e
                                                                         : -INFINITY;
  if (tid < kHeads) {
    s.running_max[tid] = -INFINITY;
    s.running_sum[tid] = 0.0f;
  }
  ptx::grid_dependency_wait();

  // q: thread t copies four 16-byte pieces of head t / 16.
  {
    const int h = tid / 16, piece0 = tid % 16;
    const bool live = head0 + h < p.num_heads;  // 8 heads: rows 8..15 are zeros
    const uint16_t* src = p.q + token * p.q_token_stride + (live ? int64_t{head0 + h} * p.q_head_stride : 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int piece = piece0 + 16 * i;
      ptx::cp_async_16(ptx::smem_address(&s.q[h][piece * 8]), src + piece * 8, live ? 16u : 0u);
    }
  }
  const int total_chunks = p.swa.chunks + p.extra.chunks;
  const int swa_len = p.swa.lens ? p.swa.lens[token] : p.swa.width;
  const int extra_len = p.extra.chunks > 0 ? p.extra.lens[token] : 0;
  const bool count_out_of_range = blockIdx.y == 0;  // once a column, not once a head group

  float acc[8][4] = {};
  for (int step = 0; step < p.chunks_per_cta; ++step) {
    const int chunk = rank * p.chunks_per_cta + step;
    if (chunk >= total_chunks) break;
    if (step > 0) __syncthreads();  // the previous chunk's P V is done with the tile and the probabilities
    const bool swa = chunk < p.swa.chunks;
    const PackedSegmentParams& seg = swa ? p.swa : p.extra;
    const int column0 = (swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns;
    gather_chunk(s, seg, token, column0, swa ? swa_len : extra_len, count_out_of_range, p.out_of_range_count);
    ptx::cp_async_commit();
    if (step == 0) ptx::launch_dependents();
    ptx::cp_async_wait_all();
    __syncthreads();
    dequantize_chunk(s);
    __syncthreads();
    score_chunk(s);
    __syncthreads();
    softmax_chunk(s, p.scale_log2);
    __syncthreads();
    accumulate_chunk(s, acc, step > 0);
  }
  ptx::cp_async_wait_all();  // q, when this CTA had no chunk
  __syncthreads();           // every warp is done with the tile: it now holds the partial O

  const int warp = tid / 32, lane = tid % 32;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int dim = warp * Traits::kDimsPerWarp + 8 * j + 2 * (lane % 4);
    *reinterpret_cast<float2*>(&s.partial[lane / 4][dim]) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(&s.partial[lane / 4 + 8][dim]) = make_float2(acc[j][2], acc[j][3]);
  }
  ptx::cluster_sync();  // every CTA's partial O and statistics are written
  reduce_owned(s, p, token, head0, rank, ctas, sink_log2);
  ptx::cluster_sync();  // no CTA leaves while a peer still reads its shared memory
}

}  // namespace sparse_decode::dsv4::packed
