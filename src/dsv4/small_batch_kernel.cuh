// The small-batch kernel of dsv4_decode: one thread-block cluster a token,
// one CTA a run of 64-column chunks, chunk softmax statistics and partial
// outputs exchanged through distributed shared memory. FP8 E4M3 q and rows.
// docs/kernels/small_batch.md explains the design and its measurements.
#pragma once

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "dsv4/kernel_params.h"
#include "dsv4/small_batch_traits.cuh"

namespace sparse_decode::dsv4 {

namespace cg = cooperative_groups;

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ int64_t row_offset(const PoolParams& pool, int64_t row) {
  if (pool.page_size == 1) return row * pool.row_stride;
  return (row / pool.page_size) * pool.page_stride + (row % pool.page_size) * pool.row_stride;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Gathers the chunk's rows (warp w: rows 16w..16w+15, lane l: bytes 16l..16l+15
// of each) and records which columns are active. Masked columns read nothing
// and are zero-filled, so NaN in their rows never reaches the MMAs.
template <class Traits>
__device__ __forceinline__ void gather_chunk(SmallBatchSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                             int column0, int len) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int column = column0 + warp * Traits::kGatherRowsPerWarp + (lane & 15);
  const bool in_width = column < p.width;
  const int32_t index = in_width ? p.indices[token * p.indices_stride + column] : -1;
  const bool swa = column < kSwaColumns;
  const int64_t rows = swa ? p.swa.rows : p.compressed.rows;
  const bool listed = index >= 0 && column < len;
  const bool active = listed && index < rows;
  if (listed && !active && lane < 16 && p.out_of_range_count) atomicAdd(p.out_of_range_count, 1);
  __syncwarp();  // reconverge before the barriers that follow
  const uint8_t* src = !active ? p.swa.data
                       : swa   ? p.swa.data + row_offset(p.swa, index)
                               : p.compressed.data + row_offset(p.compressed, index);
  const uint32_t mask = __ballot_sync(0xffffffffu, active) & 0xffffu;
  if (lane == 0) s.column_mask[warp] = static_cast<uint16_t>(mask);
#pragma unroll
  for (int i = 0; i < Traits::kGatherRowsPerWarp; ++i) {
    const uint8_t* row = reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(src), i));
    const bool row_active = (mask >> i) & 1u;
    const uint32_t dst = ptx::smem_address(&s.kv[warp * Traits::kGatherRowsPerWarp + i][lane * 16]);
    ptx::cp_async_16(dst, row + (row_active ? lane * 16 : 0), row_active ? 16u : 0u);
  }
}

// S = Q K^T for the warp's 16 columns, scaled to the log2 domain, into s.scores.
template <class Traits>
__device__ __forceinline__ void score_chunk(SmallBatchSmem<Traits>& s, float scale_log2) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = warp * Traits::kScoreColumnsPerWarp;
  const uint32_t q_base = ptx::smem_address(&s.q[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 16]);
  const uint32_t k_base =
      ptx::smem_address(&s.kv[n0 + (lane & 7) + ((lane >> 4) & 1) * 8][((lane >> 3) & 1) * 16]);
  // Two accumulator sets (even and odd k-steps) halve the dependent MMA chain.
  float acc[2][2][4] = {};
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 32; ++ks) {
    uint32_t a[4], b[4];
    ptx::ldmatrix_x4(a, q_base + ks * 32);
    ptx::ldmatrix_x4(b, k_base + ks * 32);
    ptx::mma_e4m3_16x8x32(acc[ks & 1][0], a, b[0], b[1]);
    ptx::mma_e4m3_16x8x32(acc[ks & 1][1], a, b[2], b[3]);
  }
  const int head = lane / 4, column = n0 + 2 * (lane % 4);
#pragma unroll
  for (int tile = 0; tile < 2; ++tile) {
    const float* even = acc[0][tile];
    const float* odd = acc[1][tile];
    *reinterpret_cast<float2*>(&s.scores[head][column + 8 * tile]) =
        make_float2((even[0] + odd[0]) * scale_log2, (even[1] + odd[1]) * scale_log2);
    *reinterpret_cast<float2*>(&s.scores[head + 8][column + 8 * tile]) =
        make_float2((even[2] + odd[2]) * scale_log2, (even[3] + odd[3]) * scale_log2);
  }
}

// Online softmax over the chunk: 8 threads a head, columns 4j..4j+3 and
// 32+4j..32+4j+3 each. Writes FP16 probabilities and the running statistics.
template <class Traits>
__device__ __forceinline__ void softmax_chunk(SmallBatchSmem<Traits>& s) {
  const int head = threadIdx.x / 8, part = threadIdx.x % 8;
  const uint64_t mask = uint64_t{s.column_mask[0]} | (uint64_t{s.column_mask[1]} << 16) |
                        (uint64_t{s.column_mask[2]} << 32) | (uint64_t{s.column_mask[3]} << 48);
  float v[8];
  const float4 lo = *reinterpret_cast<const float4*>(&s.scores[head][part * 4]);
  const float4 hi = *reinterpret_cast<const float4*>(&s.scores[head][32 + part * 4]);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  float chunk_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int column = (i < 4 ? 0 : 32) + part * 4 + (i & 3);
    if (!((mask >> column) & 1u)) v[i] = -INFINITY;
    chunk_max = fmaxf(chunk_max, v[i]);
  }
#pragma unroll
  for (int offset = 1; offset < 8; offset *= 2) {
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
  }
  const float old_max = s.running_max[head];
  const float new_max = fmaxf(old_max, chunk_max);
  const float base = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
  float sum = 0.0f;
  uint32_t packed[4];
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const __half2 pair = __floats2half2_rn(ptx::exp2_approx(v[i] - base), ptx::exp2_approx(v[i + 1] - base));
    const float2 rounded = __half22float2(pair);
    sum += rounded.x + rounded.y;  // the denominator sums what P V multiplies
    packed[i / 2] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  *reinterpret_cast<uint2*>(&s.probs[head][part * 4]) = make_uint2(packed[0], packed[1]);
  *reinterpret_cast<uint2*>(&s.probs[head][32 + part * 4]) = make_uint2(packed[2], packed[3]);
#pragma unroll
  for (int offset = 1; offset < 8; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncwarp();
  if (part == 0) {
    const float factor = ptx::exp2_approx(old_max - base);  // 0 while old_max is -inf
    s.rescale[head] = factor;
    s.running_sum[head] = s.running_sum[head] * factor + sum;
    s.running_max[head] = new_max;
  }
}

// O += P V for the warp's 128 dims. V comes from the FP8 tile through
// ldmatrix.trans on byte pairs: a byte permute splits each pair into the
// even-dim and odd-dim B fragments, converted exactly to FP16. So n-tile
// (half, parity) column n is dim 16*half + 2n + parity, and a thread ends up
// holding 4 consecutive dims of its two heads.
template <class Traits>
__device__ __forceinline__ void accumulate_chunk(SmallBatchSmem<Traits>& s, float (&acc)[4][2][2][4],
                                                 bool rescale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (rescale) {
    const float top = s.rescale[lane / 4], bottom = s.rescale[lane / 4 + 8];
#pragma unroll
    for (int g = 0; g < 4; ++g)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int par = 0; par < 2; ++par) {
          acc[g][h][par][0] *= top, acc[g][h][par][1] *= top;
          acc[g][h][par][2] *= bottom, acc[g][h][par][3] *= bottom;
        }
  }
  const int d0 = warp * Traits::kDimsPerWarp;
  const uint32_t p_base = ptx::smem_address(&s.probs[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  const uint32_t v_base = ptx::smem_address(&s.kv[(lane & 7) + ((lane >> 3) & 1) * 8][d0 + (lane >> 4) * 16]);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t a[4];
    ptx::ldmatrix_x4(a, p_base + kk * 16 * 2);
#pragma unroll
    for (int g = 0; g < Traits::kDimsPerWarp / 32; ++g) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * 16 * Traits::kSmemRowBytes + g * 32);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // bytes (k, 2j), (k, 2j+1), (k+1, 2j), (k+1, 2j+1) -> (k, 2j), (k+1, 2j) | (k, 2j+1), (k+1, 2j+1)
        const uint32_t rows_lo = __byte_perm(r[2 * half], 0, 0x3120);
        const uint32_t rows_hi = __byte_perm(r[2 * half + 1], 0, 0x3120);
        ptx::mma_f16_16x8x16(acc[g][half][0], a, ptx::e4m3x2_to_f16x2(rows_lo & 0xffff),
                             ptx::e4m3x2_to_f16x2(rows_hi & 0xffff));
        ptx::mma_f16_16x8x16(acc[g][half][1], a, ptx::e4m3x2_to_f16x2(rows_lo >> 16),
                             ptx::e4m3x2_to_f16x2(rows_hi >> 16));
      }
    }
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) small_batch_kernel(const __grid_constant__ Dsv4Params p) {
  using Smem = SmallBatchSmem<Traits>;
  constexpr int kHeads = Traits::kHeads;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int64_t token = blockIdx.x / ctas;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // Sinks are weights, not outputs of the previous kernel: read them before the dependency wait.
  if (tid < kHeads) {
    s.sink_log2[tid] = p.sinks ? p.sinks[tid] * kLog2e : -INFINITY;
    s.running_max[tid] = -INFINITY;
    s.running_sum[tid] = 0.0f;
  }
  ptx::grid_dependency_wait();

  const uint8_t* q = p.q + token * p.q_token_stride;
  for (int piece = tid; piece < kHeads * (kHeadDim / 16); piece += Traits::kThreads) {
    const int head = piece / (kHeadDim / 16), offset = (piece % (kHeadDim / 16)) * 16;
    ptx::cp_async_16(ptx::smem_address(&s.q[head][offset]), q + head * p.q_head_stride + offset, 16);
  }
  const int len = p.lens ? p.lens[token] : p.width;
  const float scale_log2 = (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;

  float acc[4][2][2][4] = {};
  for (int step = 0; step < p.chunks_per_cta; ++step) {
    const int column0 = (rank * p.chunks_per_cta + step) * Traits::kChunkColumns;
    gather_chunk<Traits>(s, p, token, column0, len);
    ptx::cp_async_commit();
    if (step == 0) ptx::launch_dependents();
    ptx::cp_async_wait_all();
    __syncthreads();
    score_chunk<Traits>(s, scale_log2);
    __syncthreads();
    softmax_chunk<Traits>(s);
    __syncthreads();
    accumulate_chunk<Traits>(s, acc, step > 0);
    __syncthreads();  // the KV tile is rewritten next (next chunk or partial_out)
  }

  // This CTA's unnormalized partial output, 4 consecutive dims a thread and head.
  {
    const int head = lane / 4, d0 = warp * Traits::kDimsPerWarp + 4 * (lane % 4);
#pragma unroll
    for (int g = 0; g < 4; ++g)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int d = d0 + g * 32 + half * 16;
        const float(&even)[4] = acc[g][half][0];
        const float(&odd)[4] = acc[g][half][1];
        *reinterpret_cast<float4*>(&s.partial_out[head][d]) = make_float4(even[0], odd[0], even[1], odd[1]);
        *reinterpret_cast<float4*>(&s.partial_out[head + 8][d]) = make_float4(even[2], odd[2], even[3], odd[3]);
      }
  }
  cluster.sync();  // every CTA's partial output and statistics are visible to the cluster

  for (int i = tid; i < ctas * kHeads; i += Traits::kThreads) {
    const Smem* peer = cluster.map_shared_rank(&s, i / kHeads);
    s.peer_max[i / kHeads][i % kHeads] = peer->running_max[i % kHeads];
    s.peer_sum[i / kHeads][i % kHeads] = peer->running_sum[i % kHeads];
  }
  __syncthreads();
  if (tid < kHeads) {
    float cluster_max = -INFINITY;
    for (int c = 0; c < ctas; ++c) cluster_max = fmaxf(cluster_max, s.peer_max[c][tid]);
    float sum = 0.0f;
    for (int c = 0; c < ctas; ++c) {
      const float m = s.peer_max[c][tid];
      const float weight = m == -INFINITY ? 0.0f : ptx::exp2_approx(m - cluster_max);
      s.peer_weight[c][tid] = weight;
      sum += weight * s.peer_sum[c][tid];
    }
    const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
    const bool none = cluster_max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
    s.out_scale[tid] = none ? 0.0f : bmm2 / (sum + ptx::exp2_approx(s.sink_log2[tid] - cluster_max));
    if (rank == 0 && p.lse) {
      p.lse[token * p.lse_token_stride + tid] = none ? -INFINITY : (cluster_max + __log2f(sum)) * kLn2;
    }
  }
  __syncthreads();

  // Reduce: item = (head, 8 dims); the cluster's CTAs split the items.
  constexpr int kItemsPerHead = kHeadDim / Traits::kOutputVector;
  for (int item = rank * Traits::kThreads + tid; item < kHeads * kItemsPerHead; item += ctas * Traits::kThreads) {
    const int head = item / kItemsPerHead, d = (item % kItemsPerHead) * Traits::kOutputVector;
    float o[8] = {};
#pragma unroll 4
    for (int c = 0; c < ctas; ++c) {
      const float4* src = reinterpret_cast<const float4*>(&cluster.map_shared_rank(&s, c)->partial_out[head][d]);
      const float4 x = src[0], y = src[1];
      const float w = s.peer_weight[c][head];
      o[0] += w * x.x, o[1] += w * x.y, o[2] += w * x.z, o[3] += w * x.w;
      o[4] += w * y.x, o[5] += w * y.y, o[6] += w * y.z, o[7] += w * y.w;
    }
    const float scale = s.out_scale[head];
    const uint4 packed = make_uint4(pack_bf16x2(o[0] * scale, o[1] * scale), pack_bf16x2(o[2] * scale, o[3] * scale),
                                    pack_bf16x2(o[4] * scale, o[5] * scale), pack_bf16x2(o[6] * scale, o[7] * scale));
    *reinterpret_cast<uint4*>(p.out + token * p.out_token_stride + head * p.out_head_stride + d) = packed;
  }
  cluster.sync();  // keep this CTA's shared memory alive until every peer has read it
}

}  // namespace sparse_decode::dsv4
