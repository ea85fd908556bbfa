// The packed-row kernel of dsv4_decode_packed: one thread-block cluster a
// (token, group of 16 heads), one CTA a run of 64-column chunks (the SWA
// segment's chunks, then the extra segment's). Each warp gathers 8 rows with
// cp.async, dequantizes their FP8 tiles to BF16 in shared memory and scores
// them with BF16 mma.sync, without waiting for the other warps; P V and the
// softmax statistics need two CTA barriers a chunk. The CTAs' partial results
// are pushed to their owners through distributed shared memory.
// docs/kernels/packed.md explains it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "common/granules.h"
#include "common/math.cuh"
#include "common/ptx/cluster.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "dsv4_packed/cluster_smem.cuh"
#include "dsv4_packed/params.h"

namespace sparse_decode::dsv4_packed::cluster {

using Traits = ClusterTraits;

// Gathers the chunk's rows: warp w takes rows 8w..8w+7. Lanes 0..7 load
// one index each; every lane then copies 9 of the warp's 8 x 36 16-byte
// pieces (FP8 bytes to the staging area, BF16 dims straight to the tile) and
// lanes 0..7 their row's scale bytes. Masked columns read nothing and are
// zero-filled (scale byte 0 and FP8 0 dequantize to 0), so NaN in their rows
// never reaches an MMA. Returns the warp's active rows, bit r for row 8w + r.
__device__ __forceinline__ uint32_t gather_rows(ClusterSmem& s, const SegmentParams& seg, int64_t token,
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
  return mask;
}

// The warp's 8 rows: FP8 bytes times their tile's UE8M0 scale, to BF16 in
// the tile. Exact (an E4M3 value has 4 significant bits, BF16 8) except
// below BF16's subnormal range. 8 bytes a lane and step, consecutive lanes
// consecutive bytes of a row.
__device__ __forceinline__ void dequantize_rows(ClusterSmem& s) {
  constexpr int kItems = Traits::kGatherRowsPerWarp * Traits::kDequantizeStepsPerRow;
  static_assert(kItems % 32 == 0, "whole steps");
  const int row0 = threadIdx.x / 32 * Traits::kGatherRowsPerWarp, lane = threadIdx.x % 32;
#pragma unroll 2
  for (int i = 0; i < kItems / 32; ++i) {
    const int item = i * 32 + lane;
    const int row = row0 + item / Traits::kDequantizeStepsPerRow, group = item % Traits::kDequantizeStepsPerRow;
    const uint2 bytes = *reinterpret_cast<const uint2*>(&s.raw.fp8[row][group * 8]);
    const uint32_t byte = s.raw.scales[row][group * 8 / kPackedTileDims];
    // 2^(byte - 127) as a float: byte 0 is the subnormal 2^-127, byte 255 is NaN (as in UE8M0).
    const float scale = __uint_as_float(byte == 0 ? 0x00400000u : byte == 255 ? 0x7fc00000u : byte << 23);
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = j < 2 ? bytes.x : bytes.y;
      const __half2_raw halves =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * (j % 2))), __NV_E4M3);
      const float2 values = __half22float2(*reinterpret_cast<const __half2*>(&halves));
      packed[j] = ptx::bf16x2_bits(values.x * scale, values.y * scale);
    }
    *reinterpret_cast<uint4*>(&s.kv[row][group * 8]) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// S = Q K^T for the warp's 8 columns over all 512 dims (32 k16 steps on 4
// accumulators, summed in a fixed order). Fragment: [0], [1] head lane / 4,
// [2], [3] head lane / 4 + 8; columns 8 warp + 2 (lane % 4) + 0, 1.
__device__ __forceinline__ void score_columns(const ClusterSmem& s, float (&d)[4]) {
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
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
}

// Online-softmax state of heads lane / 4 ([0]) and lane / 4 + 8 ([1]), in
// the log2 domain; every warp computes the same values.
struct SoftmaxState {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.0f, 0.0f};  // of the FP32 probabilities
};

// Scores, then the online softmax of the chunk: the warps' maxima meet in
// shared memory (barrier), each warp writes the probabilities of its columns
// as hi + lo BF16 (BF16 alone costs up to 3.6e-3 of relative error where the
// weighted rows cancel) and its sums (barrier). Returns the factor by which
// the output so far is rescaled, per head of the fragment.
__device__ __forceinline__ float2 softmax_chunk(ClusterSmem& s, SoftmaxState& state, uint32_t mask,
                                                float scale_log2) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = lane / 4, column = warp * Traits::kColumnsPerWarp + 2 * (lane % 4);
  float d[4];
  score_columns(s, d);
  const bool live0 = (mask >> (2 * (lane % 4))) & 1u, live1 = (mask >> (2 * (lane % 4) + 1)) & 1u;
  float v[4] = {live0 ? d[0] * scale_log2 : -INFINITY, live1 ? d[1] * scale_log2 : -INFINITY,
                live0 ? d[2] * scale_log2 : -INFINITY, live1 ? d[3] * scale_log2 : -INFINITY};
  float warp_max[2] = {fmaxf(v[0], v[1]), fmaxf(v[2], v[3])};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    warp_max[h] = fmaxf(warp_max[h], __shfl_xor_sync(0xffffffffu, warp_max[h], 1));
    warp_max[h] = fmaxf(warp_max[h], __shfl_xor_sync(0xffffffffu, warp_max[h], 2));
  }
  if (lane % 4 == 0) s.warp_max[head][warp] = warp_max[0], s.warp_max[head + 8][warp] = warp_max[1];
  __syncthreads();
  float base[2], factor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float4 m0 = *reinterpret_cast<const float4*>(&s.warp_max[head + 8 * h][0]);
    const float4 m1 = *reinterpret_cast<const float4*>(&s.warp_max[head + 8 * h][4]);
    const float chunk_max = fmaxf(fmaxf(fmaxf(m0.x, m0.y), fmaxf(m0.z, m0.w)), fmaxf(fmaxf(m1.x, m1.y), fmaxf(m1.z, m1.w)));
    const float new_max = fmaxf(state.max[h], chunk_max);
    base[h] = new_max == -INFINITY ? 0.0f : new_max;  // no active column yet: all p = 0
    factor[h] = ptx::exp2_approx(state.max[h] - base[h]);  // 0 while the max is -inf
    state.max[h] = new_max;
  }
  float p[4], part[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = ptx::exp2_approx(v[i] - base[i / 2]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const __nv_bfloat162 hi = __floats2bfloat162_rn(p[2 * h], p[2 * h + 1]);
    const float2 rounded = __bfloat1622float2(hi);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(p[2 * h] - rounded.x, p[2 * h + 1] - rounded.y);
    *reinterpret_cast<__nv_bfloat162*>(&s.probs.hi[head + 8 * h][column]) = hi;
    *reinterpret_cast<__nv_bfloat162*>(&s.probs.lo[head + 8 * h][column]) = lo;
    part[h] = p[2 * h] + p[2 * h + 1];
    part[h] += __shfl_xor_sync(0xffffffffu, part[h], 1);
    part[h] += __shfl_xor_sync(0xffffffffu, part[h], 2);
  }
  if (lane % 4 == 0) s.warp_sum[head][warp] = part[0], s.warp_sum[head + 8][warp] = part[1];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float chunk_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < Traits::kWarps; ++w) chunk_sum += s.warp_sum[head + 8 * h][w];  // fixed order
    state.sum[h] = state.sum[h] * factor[h] + chunk_sum;
  }
  return make_float2(factor[0], factor[1]);
}

// O = O * factor + P V for the warp's 64 dims: V's B fragments by
// ldmatrix.trans from the [column][dim] tile. acc[j] is the n8 tile of dims
// 64 warp + 8 j: [0], [1] head lane / 4, [2], [3] head lane / 4 + 8, dims
// 2 (lane % 4) + 0, 1.
__device__ __forceinline__ void accumulate_chunk(const ClusterSmem& s, float (&acc)[8][4], float2 factor) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc[j][0] *= factor.x, acc[j][1] *= factor.x, acc[j][2] *= factor.y, acc[j][3] *= factor.y;
  }
  const int fragment_row = (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t hi_base = ptx::smem_address(&s.probs.hi[fragment_row][(lane >> 4) * 8]);
  const uint32_t lo_base = ptx::smem_address(&s.probs.lo[fragment_row][(lane >> 4) * 8]);
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

// Pushes this CTA's unnormalized partial O and statistics to their owners:
// granule g (4 dims) of every head belongs to CTA g % n, slot [rank][g / n]
// [head]; the (max, sum) pairs go to every CTA (warp w to CTAs w, w + 8).
// st.async: each store completes its bytes on the owner's partials_landed
// barrier, so no cluster barrier (and its release fence over the DSMEM
// stores) is needed after the sends.
__device__ __forceinline__ void send_partials(ClusterSmem& s, const float (&acc)[8][4], const SoftmaxState& state,
                                              int rank, int ctas) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, head = lane / 4;
  const int per_owner = Traits::granules_per_owner(ctas);
  const uint32_t received = ptx::smem_address(&s.received[0]);
  const uint32_t landed = ptx::smem_address(&s.partials_landed);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int dim = warp * Traits::kDimsPerWarp + 8 * j + 2 * (lane % 4);
    const int granule = dim / 4, owner = granule % ctas;
    const uint32_t slot = received + (((rank * per_owner + granule / ctas) * Traits::kHeads + head) * 4 + dim % 4) * 4;
    const uint32_t peer = ptx::map_to_peer(slot, owner), peer_landed = ptx::map_to_peer(landed, owner);
    ptx::st_async_peer(peer, make_float2(acc[j][0], acc[j][1]), peer_landed);
    ptx::st_async_peer(peer + 8 * 16, make_float2(acc[j][2], acc[j][3]), peer_landed);  // head + 8: 8 float4 slots on
  }
  if (lane % 4 == 0) {
    const uint32_t stats = ptx::smem_address(&s.received_stats[rank][head]);
#pragma unroll
    for (int c = warp; c < Traits::kMaxClusterCtas; c += Traits::kWarps) {
      if (c >= ctas) break;
      const uint32_t peer = ptx::map_to_peer(stats, c), peer_landed = ptx::map_to_peer(landed, c);
      ptx::st_async_peer(peer, make_float2(state.max[0], state.sum[0]), peer_landed);
      ptx::st_async_peer(peer + 8 * 8, make_float2(state.max[1], state.sum[1]), peer_landed);  // head + 8
    }
  }
}

// Sums the received partial outputs of this CTA's granules in rank order
// (the same order every run: bitwise reproducible), normalizes, stores BF16.
__device__ __forceinline__ void reduce_owned(const ClusterSmem& s, const Params& p, int64_t token, int head0,
                                             int rank, int ctas, float sink_log2) {
  constexpr int kHeads = Traits::kHeads, kPeers = Traits::kMaxClusterCtas;
  const int h = threadIdx.x % kHeads;
  const int head = head0 + h;
  if (head >= p.num_heads) return;  // 8 heads: the padding rows
  float cluster_max = -INFINITY;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) cluster_max = c < ctas ? fmaxf(cluster_max, s.received_stats[c][h].x) : cluster_max;
  float weight[kPeers], sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kPeers; ++c) {
    const float2 stats = s.received_stats[c < ctas ? c : 0][h];
    weight[c] = c >= ctas || stats.x == -INFINITY ? 0.0f : ptx::exp2_approx(stats.x - cluster_max);
    sum += weight[c] * stats.y;
  }
  const bool none = cluster_max == -INFINITY;  // no active column: zeros, lse = -inf, sink or not
  const float scale = none ? 0.0f : 1.0f / (sum + ptx::exp2_approx(sink_log2 - cluster_max));
  if (rank == 0 && threadIdx.x < kHeads && p.lse) {
    p.lse[token * p.lse_token_stride + head] = none ? -INFINITY : (cluster_max + __log2f(sum)) * kLn2;
  }
  uint16_t* out = p.out + token * p.out_token_stride + head * p.out_head_stride;
  const int per_owner = Traits::granules_per_owner(ctas);
  const int owned = dsv4::owned_granules(Traits::kGranules, rank, ctas);
  for (int local = threadIdx.x / kHeads; local < owned; local += Traits::kThreads / kHeads) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kPeers; ++c) {
      if (c >= ctas || weight[c] == 0.0f) continue;  // no active column there (its O is 0)
      const float4 v = s.received[(c * per_owner + local) * kHeads + h];
      o.x += weight[c] * v.x, o.y += weight[c] * v.y, o.z += weight[c] * v.z, o.w += weight[c] * v.w;
    }
    *reinterpret_cast<uint2*>(out + (local * ctas + rank) * 4) =
        make_uint2(ptx::bf16x2_bits(o.x * scale, o.y * scale), ptx::bf16x2_bits(o.z * scale, o.w * scale));
  }
}

__global__ void __launch_bounds__(Traits::kThreads, 2) cluster_kernel(const __grid_constant__ Params p) {
  constexpr int kHeads = Traits::kHeads;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  ClusterSmem& s = *reinterpret_cast<ClusterSmem*>(smem_bytes);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int ctas = static_cast<int>(ptx::cluster_nctarank());
  const int64_t token = blockIdx.x / ctas;
  const int head0 = blockIdx.y * kHeads;
  const int tid = threadIdx.x;

  // Sinks are weights, not outputs of the previous kernel: loaded before the dependency wait.
  const float sink_log2 = p.sinks && head0 + tid % kHeads < p.num_heads ? p.sinks[head0 + tid % kHeads] * kLog2e
                                                                         : -INFINITY;
  if (tid == 0) {  // peers' partials land here after the cluster barrier that follows the walk
    const uint32_t landed = ptx::smem_address(&s.partials_landed);
    ptx::mbarrier_init(landed, 1);
    ptx::mbarrier_arrive_expect_tx(landed, dsv4::received_bytes(Traits::kGranules, kHeads, rank, ctas));
  }
  ptx::grid_dependency_wait();

  // q: thread t copies four 16-byte pieces of head t / 16, in a cp.async group of their own.
  {
    const int h = tid / 16, piece0 = tid % 16;
    const bool live = head0 + h < p.num_heads;  // 8 heads: rows 8..15 are zeros
    const uint16_t* src = p.q + token * p.q_token_stride + (live ? int64_t{head0 + h} * p.q_head_stride : 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int piece = piece0 + 16 * i;
      ptx::cp_async_16(ptx::smem_address(&s.q[h][piece * 8]), src + piece * 8, live ? 16u : 0u);
    }
    ptx::cp_async_commit();
  }
  const int total_chunks = p.swa.chunks + p.extra.chunks;
  const int swa_len = p.swa.lens ? p.swa.lens[token] : p.swa.width;
  const int extra_len = p.extra.chunks > 0 ? p.extra.lens[token] : 0;
  const bool count_out_of_range = blockIdx.y == 0;  // once a column, not once a head group

  float acc[8][4] = {};
  SoftmaxState state;
  for (int step = 0; step < p.chunks_per_cta; ++step) {
    const int chunk = rank * p.chunks_per_cta + step;
    if (chunk >= total_chunks) break;
    if (step > 0) __syncthreads();  // the previous chunk's P V is done with the tile and the probabilities
    const bool swa = chunk < p.swa.chunks;
    const SegmentParams& seg = swa ? p.swa : p.extra;
    const int column0 = (swa ? chunk : chunk - p.swa.chunks) * Traits::kChunkColumns;
    const uint32_t mask =
        gather_rows(s, seg, token, column0, swa ? swa_len : extra_len, count_out_of_range, p.out_of_range_count);
    ptx::cp_async_commit();
    if (step == 0) {
      ptx::launch_dependents();
      ptx::cp_async_wait_group<1>();  // q (issued before the indices were loaded)
      __syncthreads();
    }
    ptx::cp_async_wait_all();
    __syncwarp();  // the warp's rows, copied by all its lanes
    dequantize_rows(s);
    __syncwarp();
    const float2 factor = softmax_chunk(s, state, mask, p.scale_log2);
    accumulate_chunk(s, acc, factor);
  }
  ptx::cp_async_wait_all();  // q, when this CTA had no chunk

  // This CTA no longer reads its tile (every read has fed an MMA) and its
  // partials barrier is initialized (fenced at init): no release fence needed.
  ptx::cluster_arrive_relaxed();
  ptx::cluster_wait();  // nor does any other CTA: the partials may land in the tiles
  send_partials(s, acc, state, rank, ctas);
  ptx::mbarrier_wait_parity_cluster(ptx::smem_address(&s.partials_landed), 0);  // every partial has landed
  reduce_owned(s, p, token, head0, rank, ctas, sink_log2);
}

}  // namespace sparse_decode::dsv4_packed::cluster
