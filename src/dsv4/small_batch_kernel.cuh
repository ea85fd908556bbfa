// The small-batch kernel of dsv4_decode: one thread-block cluster a token,
// one CTA a run of 64-column chunks, chunk softmax statistics and partial
// outputs exchanged through distributed shared memory. FP8 E4M3 q and rows.
// docs/kernels/small_batch.md explains the design and its measurements.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "dsv4/kernel_params.h"
#include "dsv4/small_batch_traits.cuh"

namespace sparse_decode::dsv4 {

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

// Sends this CTA's partial output and statistics to the CTAs that own them:
// granule g of the 128 4-dim granules goes to CTA g % n, slot
// [source rank][g / n][head]; the (max, sum) pairs go to every CTA.
template <class Traits>
__device__ __forceinline__ void send_partials(SmallBatchSmem<Traits>& s, const float (&acc)[4][2][2][4], int rank,
                                              int ctas) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_owner = Traits::granules_per_owner(ctas);
  const uint32_t received = ptx::smem_address(&s.received[0]);
  const uint32_t barrier = ptx::smem_address(&s.received_barrier);
  const int head = lane / 4;
#pragma unroll
  for (int g = 0; g < 4; ++g)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int granule = (warp * Traits::kDimsPerWarp + g * 32 + half * 16) / Traits::kGranuleDims + lane % 4;
      const int owner = granule % ctas;
      const int slot = ((rank * per_owner + granule / ctas) * Traits::kHeads + head);
      const uint32_t peer_slot = ptx::map_to_peer(received + slot * 16, owner);
      const uint32_t peer_barrier = ptx::map_to_peer(barrier, owner);
      const float(&even)[4] = acc[g][half][0];
      const float(&odd)[4] = acc[g][half][1];
      ptx::st_async_peer(peer_slot, make_float4(even[0], odd[0], even[1], odd[1]), peer_barrier);
      ptx::st_async_peer(peer_slot + 8 * 16, make_float4(even[2], odd[2], even[3], odd[3]), peer_barrier);
    }
  if (threadIdx.x < Traits::kHeads) {
    const float2 stats = make_float2(s.running_max[threadIdx.x], s.running_sum[threadIdx.x]);
    const uint32_t stats_slot = ptx::smem_address(&s.received_stats[rank][threadIdx.x]);
    for (int peer = 0; peer < ctas; ++peer) {
      ptx::st_async_peer(ptx::map_to_peer(stats_slot, peer), stats, ptx::map_to_peer(barrier, peer));
    }
  }
}

// Bytes this CTA receives: its granules from every CTA, and every CTA's statistics.
template <class Traits>
__device__ __forceinline__ uint32_t bytes_to_receive(int rank, int ctas) {
  const int owned = (Traits::kGranules - rank + ctas - 1) / ctas;
  return static_cast<uint32_t>(ctas * (owned * Traits::kHeads * 16 + Traits::kHeads * 8));
}

// Sums the received partial outputs of this CTA's granules over the cluster,
// in rank order (the same order every run), normalizes and stores BF16.
// Thread t serves head t % 16 and granules t / 16, t / 16 + 8, ...: the
// head's peer weights are computed once and kept in registers.
template <class Traits>
__device__ __forceinline__ void reduce_owned(const SmallBatchSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                             int rank, int ctas) {
  constexpr int kHeads = Traits::kHeads, kPeers = Traits::kMaxClusterCtas;
  constexpr int kGranuleStride = Traits::kThreads / kHeads;
  const int per_owner = Traits::granules_per_owner(ctas);
  const int owned = (Traits::kGranules - rank + ctas - 1) / ctas;
  const int head = threadIdx.x % kHeads;

  float2 stats[kPeers];
  float cluster_max = -INFINITY;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) {
    stats[c] = c < ctas ? s.received_stats[c][head] : make_float2(-INFINITY, 0.0f);
    cluster_max = fmaxf(cluster_max, stats[c].x);
  }
  float weight[kPeers], sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) {
    weight[c] = stats[c].x == -INFINITY ? 0.0f : ptx::exp2_approx(stats[c].x - cluster_max);
    sum += weight[c] * stats[c].y;
  }
  const bool none = cluster_max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
  const float scale = none ? 0.0f : bmm2 / (sum + ptx::exp2_approx(s.sink_log2[head] - cluster_max));
  uint16_t* out = p.out + token * p.out_token_stride + head * p.out_head_stride;
  if (rank == 0 && threadIdx.x < kHeads && p.lse) {
    p.lse[token * p.lse_token_stride + head] = none ? -INFINITY : (cluster_max + __log2f(sum)) * kLn2;
  }

  for (int local = threadIdx.x / kHeads; local < owned; local += kGranuleStride) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kPeers; ++c) {
      if (c < ctas) {
        const float4 part = s.received[(c * per_owner + local) * kHeads + head];
        o.x += weight[c] * part.x, o.y += weight[c] * part.y, o.z += weight[c] * part.z, o.w += weight[c] * part.w;
      }
    }
    const uint2 packed = make_uint2(pack_bf16x2(o.x * scale, o.y * scale), pack_bf16x2(o.z * scale, o.w * scale));
    *reinterpret_cast<uint2*>(out + (local * ctas + rank) * Traits::kGranuleDims) = packed;
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 3) small_batch_kernel(const __grid_constant__ Dsv4Params p) {
  using Smem = SmallBatchSmem<Traits>;
  constexpr int kHeads = Traits::kHeads;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int ctas = static_cast<int>(ptx::cluster_nctarank());
  const int64_t token = blockIdx.x / ctas;
  const int tid = threadIdx.x;

  // Sinks are weights, not outputs of the previous kernel: their load is
  // issued before the dependency wait and lands while the gather is in flight.
  const float sink = p.sinks && tid < kHeads ? p.sinks[tid] : -INFINITY;
  if (tid < kHeads) {
    s.running_max[tid] = -INFINITY;
    s.running_sum[tid] = 0.0f;
  }
  if (tid == 0) ptx::mbarrier_init(ptx::smem_address(&s.received_barrier), 1);
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
    if (step > 0) __syncthreads();  // the previous chunk's P V is done with the KV tile
    gather_chunk<Traits>(s, p, token, column0, len);
    ptx::cp_async_commit();
    if (step == 0) {
      ptx::launch_dependents();
      if (tid < kHeads) s.sink_log2[tid] = sink * kLog2e;
    }
    ptx::cp_async_wait_all();
    __syncthreads();
    score_chunk<Traits>(s, scale_log2);
    __syncthreads();
    softmax_chunk<Traits>(s);
    __syncthreads();
    accumulate_chunk<Traits>(s, acc, step > 0);
  }

  // Every CTA of the cluster is past its last read of its KV tile (which
  // receives the peers' partials) and has initialized its barrier.
  // The expected bytes are set before the arrive, so no peer's bytes can land first.
  if (tid == 0) {
    ptx::mbarrier_arrive_expect_tx(ptx::smem_address(&s.received_barrier), bytes_to_receive<Traits>(rank, ctas));
  }
  ptx::cluster_arrive_relaxed();
  ptx::cluster_wait();
  send_partials<Traits>(s, acc, rank, ctas);
  ptx::mbarrier_wait_parity(ptx::smem_address(&s.received_barrier), 0);
  reduce_owned<Traits>(s, p, token, rank, ctas);
}

}  // namespace sparse_decode::dsv4
