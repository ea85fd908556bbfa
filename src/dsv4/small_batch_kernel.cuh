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

// Gathers the chunk's rows into the core-matrix tile: warp w takes row group
// w (rows 8w..8w+7); lane l copies pieces l/8, l/8 + 4, ... of row 8w + l%8,
// so each copy instruction of a warp fills four whole core matrices (no bank
// conflicts). Masked columns read nothing and are zero-filled, so NaN in
// their rows never reaches the MMAs.
template <class Traits>
__device__ __forceinline__ void gather_chunk(SmallBatchSmem<Traits>& s, const Dsv4Params& p, int64_t token,
                                             int column0, int len, int window) {
  constexpr int kRows = Traits::kGatherRowsPerWarp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int column = column0 + warp * kRows + lane % kRows;
  const int32_t index = column < p.width ? p.indices[token * p.indices_stride + column] : -1;
  const bool swa = column < kSwaColumns;
  const int64_t rows = swa ? p.swa.rows : p.compressed.rows;
  const bool listed = index >= 0 && column < len && (!swa || column < window);
  const bool active = listed && index < rows;
  if (listed && !active && lane < kRows && p.out_of_range_count) atomicAdd(p.out_of_range_count, 1);
  __syncwarp();  // reconverge before the barriers that follow
  const uint8_t* src = !active ? p.swa.data
                       : swa   ? p.swa.data + row_offset(p.swa, index)
                               : p.compressed.data + row_offset(p.compressed, index);
  const uint32_t mask = __ballot_sync(0xffffffffu, active) & ((1u << kRows) - 1);
  if (lane == 0) s.column_mask[warp] = static_cast<uint8_t>(mask);
  const int row = lane % kRows;
  const uint32_t dst = ptx::smem_address(&s.kv[warp][lane / kRows][row][0]);
  constexpr int kLanesPerRow = 32 / kRows;
#pragma unroll
  for (int i = 0; i < Traits::kPieces / kLanesPerRow; ++i) {
    const int piece = lane / kRows + i * kLanesPerRow;
    const bool load = active && !(p.skip_stages & 1);
    ptx::cp_async_16(dst + i * kLanesPerRow * Traits::kCoreBytes, src + (load ? piece * 16 : 0), load ? 16u : 0u);
  }
}

// Partial S^T = K Q^T (64 columns x 16 heads) of this warpgroup's half of
// the dims, with wgmma on the FP8 tiles: no conversion, each operand byte
// read once. Stored as scores[warpgroup][head][column].
template <class Traits>
__device__ __forceinline__ void score_chunk(SmallBatchSmem<Traits>& s) {
  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int piece0 = warpgroup * Traits::kPiecesPerWarpgroup;
  const uint32_t kv = ptx::smem_address(&s.kv[0][piece0][0][0]);
  const uint32_t q = ptx::smem_address(&s.q[0][piece0][0][0]);
  // FP8 wgmma accumulates with reduced precision: each pair of k32 steps gets
  // its own accumulator, summed in FP32 afterwards (all issued before one wait).
  constexpr int kSteps = Traits::kPiecesPerWarpgroup / 2, kSets = kSteps / 2;
  float partial[kSets][8];
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {  // one k32 step = two 16-byte pieces
    const uint64_t a = ptx::wgmma_descriptor(kv + k * 2 * Traits::kCoreBytes, Traits::kCoreBytes, Traits::kRowGroupBytes);
    const uint64_t b = ptx::wgmma_descriptor(q + k * 2 * Traits::kCoreBytes, Traits::kCoreBytes, Traits::kRowGroupBytes);
    ptx::wgmma_e4m3_64x16x32(partial[k / 2], a, b, k % 2 == 1);
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait_all();
  float d[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    d[i] = partial[0][i];
#pragma unroll
    for (int set = 1; set < kSets; ++set) d[i] += partial[set][i];
  }
  // Fragment: rows (columns of the chunk) 16 warp + lane/4 (+8), heads 8j + 2(lane%4) (+1).
  const int column = 16 * warp + lane / 4, head = 2 * (lane % 4);
  float(&scores)[Traits::kHeads][Traits::kScoreRowFloats] = s.scores[warpgroup];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    scores[8 * j + head][column] = d[4 * j + 0];
    scores[8 * j + head + 1][column] = d[4 * j + 1];
    scores[8 * j + head][column + 8] = d[4 * j + 2];
    scores[8 * j + head + 1][column + 8] = d[4 * j + 3];
  }
}

// Online softmax over the chunk: 16 threads a head, 4 columns each. Writes
// FP16 probabilities and the running statistics.
template <class Traits>
__device__ __forceinline__ void softmax_chunk(SmallBatchSmem<Traits>& s, float scale_log2) {
  static_assert(Traits::kWarpgroups == 2, "the score is the sum of the two warpgroups' halves");
  const int head = threadIdx.x / 16, part = threadIdx.x % 16;
  const uint64_t mask = *reinterpret_cast<const uint64_t*>(s.column_mask) >> (part * 4);
  const float4 lo = *reinterpret_cast<const float4*>(&s.scores[0][head][part * 4]);
  const float4 hi = *reinterpret_cast<const float4*>(&s.scores[1][head][part * 4]);
  float v[4] = {(lo.x + hi.x) * scale_log2, (lo.y + hi.y) * scale_log2, (lo.z + hi.z) * scale_log2,
                (lo.w + hi.w) * scale_log2};
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
  const __half2 p01 = __floats2half2_rn(ptx::exp2_approx(v[0] - base), ptx::exp2_approx(v[1] - base));
  const __half2 p23 = __floats2half2_rn(ptx::exp2_approx(v[2] - base), ptx::exp2_approx(v[3] - base));
  *reinterpret_cast<uint2*>(&s.probs[head][part * 4]) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&p01), *reinterpret_cast<const uint32_t*>(&p23));
  const float2 f01 = __half22float2(p01), f23 = __half22float2(p23);
  float sum = (f01.x + f01.y) + (f23.x + f23.y);  // the denominator sums what P V multiplies
#pragma unroll
  for (int offset = 1; offset < 16; offset *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncwarp();
  if (part == 0) {
    const float factor = ptx::exp2_approx(old_max - base);  // 0 while old_max is -inf
    s.rescale[head] = factor;
    s.running_sum[head] = s.running_sum[head] * factor + sum;
    s.running_max[head] = new_max;
  }
}

// O += P V for the warp's 64 dims. V comes from the FP8 tile through
// ldmatrix.trans on byte pairs: a byte permute splits each pair into the
// even-dim and odd-dim B fragments, converted exactly to FP16. So n-tile
// (half, parity) column n is dim 16*half + 2n + parity, and a thread ends up
// holding 4 consecutive dims of its two heads.
template <class Traits>
__device__ __forceinline__ void accumulate_chunk(SmallBatchSmem<Traits>& s, float (&acc)[Traits::kDimsPerWarp / 32][2][2][4],
                                                 bool rescale) {
  constexpr int kGroups = Traits::kDimsPerWarp / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (rescale) {
    const float top = s.rescale[lane / 4], bottom = s.rescale[lane / 4 + 8];
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
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
  // Matrices of an ldmatrix.x4: rows k..k+7 / k+8..k+15 (row groups) x dims d..d+15 / d+16..d+31 (pieces).
  const uint32_t v_base = ptx::smem_address(&s.kv[(lane >> 3) & 1][d0 / 16 + (lane >> 4)][lane & 7][0]);
#pragma unroll
  for (int kk = 0; kk < Traits::kChunkColumns / 16; ++kk) {
    uint32_t a[4];
    ptx::ldmatrix_x4(a, p_base + kk * 16 * 2);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      uint32_t r[4];
      ptx::ldmatrix_x4_trans(r, v_base + kk * 2 * Traits::kRowGroupBytes + g * 2 * Traits::kCoreBytes);
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

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Sends this CTA's statistics and partial output to the CTAs that own them.
// The partial output travels as FP16 divided by this CTA's softmax sum (a
// weighted mean of V rows: |value| <= 448, no overflow), half the bytes of
// FP32. Granule g of the 128 4-dim granules goes to CTA g % n, slot
// [source rank][g / n][head]; the (max, sum) pairs go to every CTA.
template <class Traits>
__device__ __forceinline__ void send_partials(SmallBatchSmem<Traits>& s,
                                              const float (&acc)[Traits::kDimsPerWarp / 32][2][2][4], int rank,
                                              int ctas, float2 own_stats) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t barrier = ptx::smem_address(&s.received_barrier);
  // (max, sum) of head h to CTA c: thread c * 16 + h (first: the owners start with them).
  if (threadIdx.x < ctas * Traits::kHeads) {
    const int peer = threadIdx.x / Traits::kHeads, h = threadIdx.x % Traits::kHeads;
    const uint32_t stats_slot = ptx::smem_address(&s.received_stats[rank][h]);
    ptx::st_async_peer(ptx::map_to_peer(stats_slot, peer), own_stats, ptx::map_to_peer(barrier, peer));
  }
  const int per_owner = Traits::granules_per_owner(ctas);
  const uint32_t received = ptx::smem_address(&s.received[0]);
  const int head = lane / 4;
  const float top_sum = s.running_sum[head], bottom_sum = s.running_sum[head + 8];
  const float top = top_sum > 0.0f ? 1.0f / top_sum : 0.0f, bottom = bottom_sum > 0.0f ? 1.0f / bottom_sum : 0.0f;
  // granule / ctas as a multiply-high: exact for granule < 2^32 / ctas^2 (ctas >= 2).
  const uint32_t reciprocal = 0xffffffffu / static_cast<uint32_t>(ctas) + 1;
#pragma unroll
  for (int g = 0; g < Traits::kDimsPerWarp / 32; ++g)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int granule = (warp * Traits::kDimsPerWarp + g * 32 + half * 16) / Traits::kGranuleDims + lane % 4;
      const int local = static_cast<int>(__umulhi(static_cast<uint32_t>(granule), reciprocal));
      const int owner = granule - local * ctas;
      const int slot = (rank * per_owner + local) * Traits::kHeads + head;
      const uint32_t peer_slot = ptx::map_to_peer(received + slot * 8, owner);
      const uint32_t peer_barrier = ptx::map_to_peer(barrier, owner);
      const float(&even)[4] = acc[g][half][0];
      const float(&odd)[4] = acc[g][half][1];
      ptx::st_async_peer(peer_slot,
                         make_uint2(pack_f16x2(even[0] * top, odd[0] * top), pack_f16x2(even[1] * top, odd[1] * top)),
                         peer_barrier);
      ptx::st_async_peer(peer_slot + 8 * 8,
                         make_uint2(pack_f16x2(even[2] * bottom, odd[2] * bottom),
                                    pack_f16x2(even[3] * bottom, odd[3] * bottom)),
                         peer_barrier);
    }
}

// Bytes this CTA receives: its granules from every CTA, and every CTA's statistics.
template <class Traits>
__device__ __forceinline__ uint32_t bytes_to_receive(int rank, int ctas) {
  const int owned = (Traits::kGranules - rank + ctas - 1) / ctas;
  return static_cast<uint32_t>(ctas * (owned * Traits::kHeads * 8 + Traits::kHeads * 8));
}

// Sums the received partial outputs of this CTA's granules over the cluster,
// in rank order (the same order every run), normalizes and stores BF16.
// Thread t serves head t % 16 and granules t / 16, t / 16 + 16, ...; kPeers
// >= the cluster size bounds the unrolled loops (unused peers weigh 0).
template <class Traits, int kPeers>
__device__ __forceinline__ void reduce_owned(const SmallBatchSmem<Traits>& s, uint16_t* out_head, float* lse_head,
                                             float bmm2, int rank, int ctas) {
  constexpr int kHeads = Traits::kHeads;
  constexpr int kGranuleStride = Traits::kThreads / kHeads;
  const int per_owner = Traits::granules_per_owner(ctas);
  const int owned = (Traits::kGranules - rank + ctas - 1) / ctas;
  const int head = threadIdx.x % kHeads;

  float2 stats[kPeers];
  float cluster_max = -INFINITY;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) {
    stats[c] = s.received_stats[c < ctas ? c : 0][head];
    cluster_max = fmaxf(cluster_max, stats[c].x);
  }
  // Each peer's mean weighs exp2(max_c - max) * sum_c.
  float weight[kPeers], sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) {
    weight[c] = c >= ctas || stats[c].x == -INFINITY ? 0.0f : ptx::exp2_approx(stats[c].x - cluster_max) * stats[c].y;
    sum += weight[c];
  }
  const bool none = cluster_max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  const float scale = none ? 0.0f : bmm2 / (sum + ptx::exp2_approx(s.sink_log2[head] - cluster_max));
  if (lse_head) *lse_head = none ? -INFINITY : (cluster_max + __log2f(sum)) * kLn2;
  for (int local = threadIdx.x / kHeads; local < owned; local += kGranuleStride) {
    uint2 part[kPeers];
#pragma unroll
    for (int c = 0; c < kPeers; ++c) part[c] = s.received[((c < ctas ? c : 0) * per_owner + local) * kHeads + head];
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kPeers; ++c) {
      const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&part[c].x));
      const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&part[c].y));
      o.x += weight[c] * lo.x, o.y += weight[c] * lo.y, o.z += weight[c] * hi.x, o.w += weight[c] * hi.y;
    }
    const uint2 packed = make_uint2(pack_bf16x2(o.x * scale, o.y * scale), pack_bf16x2(o.z * scale, o.w * scale));
    *reinterpret_cast<uint2*>(out_head + (local * ctas + rank) * Traits::kGranuleDims) = packed;
  }
}

// SWA columns valid for the token under seq_lens: min(128, position + 1),
// position = seq_lens[b] - q_len_b + (index of the token in request b).
// Called by every thread of a CTA that holds SWA columns (varlen: a barrier).
template <class Traits>
__device__ __forceinline__ int swa_window(SmallBatchSmem<Traits>& s, const Dsv4Params& p, int64_t token) {
  int64_t position;
  if (!p.cum_seq_lens_q) {
    const int64_t request = token / p.q_len;
    position = int64_t{p.seq_lens[request]} - p.q_len + (token - request * p.q_len);
  } else {
    // Find the request whose query range holds the token, all threads at once.
    if (threadIdx.x == 0) s.request = -1;
    __syncthreads();
    for (int b = threadIdx.x; b < p.num_requests; b += Traits::kThreads) {
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

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 2) small_batch_kernel(const __grid_constant__ Dsv4Params p) {
  using Smem = SmallBatchSmem<Traits>;
  constexpr int kHeads = Traits::kHeads;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  Smem& s = *reinterpret_cast<Smem*>(smem_bytes);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int ctas = static_cast<int>(ptx::cluster_nctarank());
  const int64_t token = blockIdx.x / ctas;
  const int tid = threadIdx.x;

  if (p.skip_stages & 8) return;
  // The receive barrier expects its bytes before the cluster barrier's arrive
  // (released: nothing is in flight yet, so the fence is cheap); the matching
  // wait comes only before the first send, long after every CTA arrived.
  if (tid == 0) {
    const uint32_t barrier = ptx::smem_address(&s.received_barrier);
    ptx::mbarrier_init(barrier, 1);
    ptx::mbarrier_arrive_expect_tx(barrier, bytes_to_receive<Traits>(rank, ctas));
  }
  ptx::cluster_arrive_release();
  // Sinks are weights, not outputs of the previous kernel: their load is
  // issued before the dependency wait and lands while the gather is in flight.
  const float sink = p.sinks && tid < kHeads ? p.sinks[tid] : -INFINITY;
  if (tid < kHeads) {
    s.running_max[tid] = -INFINITY;
    s.running_sum[tid] = 0.0f;
  }
  ptx::grid_dependency_wait();

  const uint8_t* q = p.q + token * p.q_token_stride;
  // Thread t copies piece t/8 of heads t%8 and t%8 + 8: a warp fills whole core matrices.
  static_assert(Traits::kThreads == 8 * Traits::kPieces, "one Q piece of each head group a thread");
  {
    const int head = tid % 8, piece = tid / 8;
    const uint8_t* src = q + head * p.q_head_stride + piece * 16;
    ptx::cp_async_16(ptx::smem_address(&s.q[0][piece][head][0]), src, 16);
    ptx::cp_async_16(ptx::smem_address(&s.q[1][piece][head][0]), src + 8 * p.q_head_stride, 16);
  }
  const int len = p.lens ? p.lens[token] : p.width;
  const bool has_swa_columns = rank * p.chunks_per_cta * Traits::kChunkColumns < kSwaColumns;
  const int window = p.seq_lens && has_swa_columns ? swa_window<Traits>(s, p, token) : kSwaColumns;
  const float scale_log2 = (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;
  const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
  // Output addresses of the reduction, computed now: the parameters they
  // read would otherwise be fetched (and miss in the constant cache) at the end.
  uint16_t* out_head = p.out + token * p.out_token_stride + (tid % kHeads) * p.out_head_stride;
  float* lse_head = p.lse && rank == 0 && tid < kHeads ? p.lse + token * p.lse_token_stride + tid : nullptr;
  asm volatile("" : "+l"(out_head), "+l"(lse_head));

  float acc[Traits::kDimsPerWarp / 32][2][2][4] = {};
  for (int step = 0; step < p.chunks_per_cta; ++step) {
    const int column0 = (rank * p.chunks_per_cta + step) * Traits::kChunkColumns;
    if (step > 0) __syncthreads();  // the previous chunk's P V is done with the KV tile
    gather_chunk<Traits>(s, p, token, column0, len, window);
    ptx::cp_async_commit();
    if (step == 0) {
      ptx::launch_dependents();
      if (tid < kHeads) s.sink_log2[tid] = sink * kLog2e;
    }
    ptx::cp_async_wait_all();
    ptx::fence_proxy_async_shared();  // the copies are read by wgmma (async proxy)
    __syncthreads();
    if (p.skip_stages & 4) return;
    score_chunk<Traits>(s);
    __syncthreads();
    softmax_chunk<Traits>(s, scale_log2);
    __syncthreads();
    accumulate_chunk<Traits>(s, acc, step > 0);
  }

  const float2 own_stats = make_float2(s.running_max[tid % kHeads], s.running_sum[tid % kHeads]);
  ptx::cluster_wait();  // every CTA's receive barrier is initialized
  if (p.skip_stages & 2) {
    if (tid < kHeads) s.received_stats[0][tid] = own_stats;
    __syncthreads();
    reduce_owned<Traits, 1>(s, out_head, lse_head, bmm2, 0, 1);
    return;
  }
  send_partials<Traits>(s, acc, rank, ctas, own_stats);
  ptx::mbarrier_wait_parity(ptx::smem_address(&s.received_barrier), 0);
  // Exact peer counts for DeepSeek-V4's widths (128: 2 CTAs, 640: 10), bounds otherwise.
  if (ctas == 2) {
    reduce_owned<Traits, 2>(s, out_head, lse_head, bmm2, rank, ctas);
  } else if (ctas <= 4) {
    reduce_owned<Traits, 4>(s, out_head, lse_head, bmm2, rank, ctas);
  } else if (ctas <= 8) {
    reduce_owned<Traits, 8>(s, out_head, lse_head, bmm2, rank, ctas);
  } else if (ctas == 10) {
    reduce_owned<Traits, 10>(s, out_head, lse_head, bmm2, rank, ctas);
  } else {
    reduce_owned<Traits, Traits::kMaxClusterCtas>(s, out_head, lse_head, bmm2, rank, ctas);
  }
}

}  // namespace sparse_decode::dsv4
