// The dsa_decode kernels (SPEC section 4; design and measurements in
// docs/kernels/dsa.md). The split kernel: one CTA a (row, split), 4 warps;
// it walks the split's region columns (c = split, split + splits, ...) in
// tiles of up to 64 visible keys of one region, scores them with
// mma.sync m16n8k16 BF16 (the row's heads are M = 16, padded), keeps an
// online softmax in the log2 domain, and multiplies P (BF16 hi + lo) by V.
// Warp w owns keys 16w..16w+15 of a tile: the tile's maximum goes through
// shared memory, the sums and P V stay per warp until the end, where the 4
// warps are added in order. The combine kernel merges the splits in order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common/math.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/load.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "dsa/params.h"

namespace sparse_decode::dsa {

struct DsaTraits {
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kHeads = 16;                      // mma M: the row's heads, zero-padded
  static constexpr int kKeys = 64;                       // keys a tile
  static constexpr int kKeysPerWarp = kKeys / kWarps;    // 16: one k16 step of P V
  static constexpr int kDims = kDsaHeadDim;              // 192
  static constexpr int kRowHalves = kDims + 8;           // 400-byte rows: 25 x 16 B, so ldmatrix rows hit distinct banks
  static constexpr int kScoreSteps = kDims / 16;         // k16 steps of Q K^T
  static constexpr int kDimTiles = kDims / 8;            // n8 tiles of P V
  static constexpr int kGranules = kDims / 4;            // 4-dim pieces of an output row
  static constexpr int kColumnBatch = 256;               // region columns a split resolves at once
  static_assert(kKeysPerWarp == 16, "a warp's P is one k16 A fragment (two n8 score tiles)");
  static_assert(kColumnBatch % kThreads == 0, "a thread resolves kColumnBatch / kThreads columns of a batch");
  static_assert(kDims % 16 == 0, "Q K^T walks k16 steps; P V pairs of n8 tiles");
  static_assert((kRowHalves * 2 / 16) % 2 == 1, "an odd number of 16-byte units a row: conflict-free ldmatrix");
};

// BF16 tiles: two K/V buffers, the next tile's copies land during this
// one's math. FP8: two staging buffers of raw slots and one BF16 K/V tile
// that each tile is converted into before its math.
template <bool kFp8>
struct DsaSmem {
  using T = DsaTraits;
  static constexpr int kTileBuffers = kFp8 ? 1 : 2;
  struct KvTile {
    uint16_t k[T::kKeys][T::kRowHalves];  // BF16 keys of the tile
    uint16_t v[T::kKeys][T::kRowHalves];  // values: BF16, or FP16 from FP8 caches
  };
  union Tiles {
    KvTile kv[kTileBuffers];
    float reduce[T::kWarps][T::kHeads][T::kDims];  // the warps' P V, added at the end
  } tiles;
  uint16_t q[T::kHeads][T::kRowHalves];
  alignas(16) uint8_t staging[kFp8 ? 2 : 1][kFp8 ? T::kKeys : 1][kFp8 ? kDsaSlotDim : 16];  // FP8 slots
  int64_t column_page[T::kColumnBatch];   // the page of each region column of the batch
  int32_t column_count[T::kColumnBatch];  // its visible slots (0: nothing to read)
  float warp_max[T::kWarps][T::kHeads];
  float warp_sum[T::kWarps][T::kHeads];
  float head_max[T::kHeads];  // the final maximum of each head (log2 domain)
};

static_assert(2 * (sizeof(DsaSmem<false>) + 1024) <= 228 * 1024 && 2 * (sizeof(DsaSmem<true>) + 1024) <= 228 * 1024,
              "two CTAs an SM: the next tile's copies of one overlap the other's math");

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) { return __uint_as_float(uint32_t{bits} << 16); }

__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const __nv_bfloat16 b = __float2bfloat16_rn(value);
  return *reinterpret_cast<const uint16_t*>(&b);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return uint32_t{float_to_bf16_bits(lo)} | (uint32_t{float_to_bf16_bits(hi)} << 16);
}

// round_to(gate dtype, sigmoid(gate)) of head h of `row`, or 1 without a gate
// (docs/dsa_layout.md, decision 1: float32 sigmoid with a rounded division).
// The gate's input for a head of the row as a float (0 without a gate); an
// L2 load that ptxas may not sink, so the combine issues it with its others.
__device__ __forceinline__ float gate_input(const DsaParams& p, int64_t row, int head) {
  if (!p.gate) return 0.0f;
  const int64_t token = row / p.groups;
  const int64_t index = token * p.gate_token_stride + (row % p.groups) * p.heads + head;
  return p.gate_is_f32 ? ptx::load_l2(static_cast<const float*>(p.gate) + index)
                       : bf16_bits_to_float(ptx::load_l2(static_cast<const uint16_t*>(p.gate) + index));
}

// The factor the gate puts on a head's output: sigmoid(x), rounded to BF16
// with a BF16 gate; 1 without a gate.
__device__ __forceinline__ float gate_of(const DsaParams& p, float x) {
  if (!p.gate) return 1.0f;
  const float sigmoid = __fdiv_rn(1.0f, 1.0f + expf(-x));
  return p.gate_is_f32 ? sigmoid : bf16_bits_to_float(float_to_bf16_bits(sigmoid));
}

__device__ __forceinline__ float gate_factor(const DsaParams& p, int64_t row, int head) {
  return gate_of(p, gate_input(p, row, head));
}

// Stores 4 dims of an output head as BF16 (rounded once, after the gate).
__device__ __forceinline__ void store_out4(uint16_t* dst, float4 v) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
}

// The keys of a region column (logical block `block`) that the row sees:
// its page and how many of its first slots are visible (0: the column
// contributes nothing and, past the position, its table entry is not read).
struct RegionKeys {
  int64_t page;
  int32_t count;
};

__device__ __forceinline__ RegionKeys region_keys(const DsaParams& p, int64_t request, int32_t position,
                                                  int32_t block) {
  if (block < 0 || block >= p.max_blocks) return {0, 0};
  const int64_t first = int64_t{block} * p.block_size;
  if (first > position) return {0, 0};
  const int32_t page = p.block_table[request * p.block_table_stride + block];
  if (page < 0 || page >= p.num_pages) return {0, 0};
  const int64_t visible = int64_t{position} - first + 1;
  return {page, static_cast<int32_t>(visible < p.block_size ? visible : p.block_size)};
}

// Issues the copies of slots [0, n) at `slots` into tile buffer `buffer`
// (FP8: the staging buffer); keys n..63 are zero-filled, so the NaN the
// caller may keep in unread slots never reaches an MMA.
template <bool kFp8>
__device__ __forceinline__ void issue_tile(DsaSmem<kFp8>& s, const uint8_t* slots, int64_t slot_stride, int n,
                                           int buffer) {
  using T = DsaTraits;
  constexpr int kSlotPieces = kDsaSlotDim * (kFp8 ? 1 : 2) / 16;  // 16-byte pieces of a slot: 24 FP8, 48 BF16
  constexpr int kHalfPieces = kSlotPieces / 2;                    // K, then V
  for (int x = threadIdx.x; x < T::kKeys * kSlotPieces; x += T::kThreads) {
    const int key = x / kSlotPieces, piece = x % kSlotPieces;
    const uint8_t* src = key < n ? slots + key * slot_stride + piece * 16 : slots;
    uint32_t dst;
    if constexpr (kFp8) {
      dst = ptx::smem_address(&s.staging[buffer][key][piece * 16]);
    } else {
      dst = piece < kHalfPieces ? ptx::smem_address(&s.tiles.kv[buffer].k[key][piece * 8])
                                : ptx::smem_address(&s.tiles.kv[buffer].v[key][(piece - kHalfPieces) * 8]);
    }
    ptx::cp_async_16(dst, src, key < n ? 16u : 0u);
  }
  ptx::cp_async_commit();
}

// FP8: converts staging buffer `buffer` into the K/V tile, exactly: K to
// BF16 (q is BF16), V to FP16, so that P V takes P in FP16 (one MMA, where
// BF16 P needs hi + lo).
__device__ __forceinline__ void convert_tile(DsaSmem<true>& s, int buffer) {
  using T = DsaTraits;
  constexpr int kSlotPieces = kDsaSlotDim / 16, kHalfPieces = kSlotPieces / 2;
  for (int x = threadIdx.x; x < T::kKeys * kSlotPieces; x += T::kThreads) {
    const int key = x / kSlotPieces, piece = x % kSlotPieces;
    const uint4 bytes = *reinterpret_cast<const uint4*>(&s.staging[buffer][key][piece * 16]);
    const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
    const bool is_key = piece < kHalfPieces;
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint16_t pair = static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2)));
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      if (is_key) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        out[i] = pack_bf16(f.x, f.y);  // K as BF16 for BF16 q (exact: E4M3 values are BF16 values)
      } else {
        out[i] = uint32_t{h.x} | (uint32_t{h.y} << 16);  // V as FP16 (exact), so P can be FP16
      }
    }
    uint16_t* dst = piece < kHalfPieces ? &s.tiles.kv[0].k[key][piece * 16] : &s.tiles.kv[0].v[key][(piece - kHalfPieces) * 16];
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

// A position in the split's walk: region column `column` of the batch, its
// slots from `first` (first >= count: past the batch's last tile).
struct TileCursor {
  int column;
  int first;
};

// The first tile at or after (column, first) of the batch's `columns`.
template <bool kFp8>
__device__ __forceinline__ TileCursor seek_tile(const DsaSmem<kFp8>& s, int columns, TileCursor at) {
  while (at.column < columns && at.first >= s.column_count[at.column]) at = {at.column + 1, 0};
  return at;
}

// The online softmax state of this thread's two heads (lane / 4 and + 8).
struct HeadPair {
  float max[2] = {-INFINITY, -INFINITY};  // log2 domain, CTA-wide over the keys so far
  float sum[2] = {0.0f, 0.0f};            // this thread's share of the sum (its key columns)
};

template <bool kFp8>
__global__ void __launch_bounds__(DsaTraits::kThreads) dsa_split_kernel(const __grid_constant__ DsaParams p) {
  using T = DsaTraits;
  extern __shared__ __align__(16) uint8_t smem_bytes[];
  DsaSmem<kFp8>& s = *reinterpret_cast<DsaSmem<kFp8>*>(smem_bytes);
  const int64_t row = blockIdx.x / p.splits;
  const int split = static_cast<int>(blockIdx.x % p.splits);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  ptx::grid_dependency_wait();  // every input is per-step data the previous kernel may write
  // The row's metadata and the first batch's region ids load at once (L2
  // loads that ptxas may not sink into the branches that use them): one
  // DRAM trip before the block table instead of three in a row.
  const int split_columns = (p.num_regions - split + p.splits - 1) / p.splits;
  const int32_t* row_regions = p.regions + row * p.regions_stride + split;
  int32_t first_blocks[T::kColumnBatch / T::kThreads];
#pragma unroll
  for (int u = 0; u < T::kColumnBatch / T::kThreads; ++u) {
    const int j = threadIdx.x + u * T::kThreads;
    first_blocks[u] = j < split_columns ? ptx::load_l2(row_regions + int64_t{j} * p.splits) : -1;
  }
  const bool active = ptx::load_l2(p.active + row) != 0;
  const int32_t position = ptx::load_l2(p.positions + row);
  const float k_scale = kFp8 ? ptx::load_l2(p.k_scale) : 1.0f;
  const float v_scale = kFp8 ? ptx::load_l2(p.v_scale) : 1.0f;
  if (!active) {
    // The combine zeroes the row (splits > 1); one split zeroes it here.
    if (p.splits == 1 && p.clear_inactive) {
      for (int x = threadIdx.x; x < p.heads * T::kGranules; x += T::kThreads) {
        store_out4(p.out + row * p.out_row_stride + (x / T::kGranules) * p.out_head_stride + (x % T::kGranules) * 4,
                   make_float4(0.0f, 0.0f, 0.0f, 0.0f));
      }
    }
    ptx::launch_dependents();
    return;
  }

  // Q: heads rows of 192 dims, rows past `heads` zero.
  for (int x = threadIdx.x; x < T::kHeads * (T::kDims / 8); x += T::kThreads) {
    const int head = x / (T::kDims / 8), piece = x % (T::kDims / 8);
    const bool exists = head < p.heads;
    const uint16_t* src = p.q + row * p.q_row_stride + (exists ? head * p.q_head_stride + piece * 8 : 0);
    ptx::cp_async_16(ptx::smem_address(&s.q[head][piece * 8]), src, exists ? 16u : 0u);
  }
  ptx::cp_async_commit();

  const int64_t request = row / (int64_t{p.groups} * p.query_len);
  const uint8_t* group_base = p.cache + (row % p.groups) * p.group_stride;
  const float scale_log2 = p.scale * k_scale * kLog2e;

  // ldmatrix addresses: Q as the A operand (rows = heads), K as B (n = keys),
  // V as B transposed (k = keys).
  const uint32_t q_base = ptx::smem_address(&s.q[(lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);
  const int key0 = warp * T::kKeysPerWarp;
  const uint32_t k_tile_base =
      ptx::smem_address(&s.tiles.kv[0].k[key0 + (lane & 7) + ((lane >> 4) << 3)][((lane >> 3) & 1) * 8]);
  const uint32_t v_tile_base =
      ptx::smem_address(&s.tiles.kv[0].v[key0 + (lane & 7) + ((lane >> 3) & 1) * 8][(lane >> 4) * 8]);

  HeadPair state;
  float o[T::kDimTiles][4] = {};  // this warp's P V: heads g (0, 1) and g + 8 (2, 3), dims 8d + 2t (+1)

  // The split's region columns in batches: each thread resolves one column
  // (its page and visible slots: two dependent loads for all of them at
  // once), then the batch's tiles are walked with the next tile's copies in
  // flight during this one's math.
  for (int batch0 = 0; batch0 < split_columns; batch0 += T::kColumnBatch) {
    const int columns = split_columns - batch0 < T::kColumnBatch ? split_columns - batch0 : T::kColumnBatch;
    __syncthreads();  // the previous batch's walk is done with the column table and the tiles
#pragma unroll
    for (int u = 0; u < T::kColumnBatch / T::kThreads; ++u) {
      const int j = threadIdx.x + u * T::kThreads;
      if (j >= columns) break;
      const int32_t block = batch0 == 0 ? first_blocks[u] : row_regions[int64_t{batch0 + j} * p.splits];
      const RegionKeys region = region_keys(p, request, position, block);
      s.column_page[j] = region.page;
      s.column_count[j] = region.count;
    }
    __syncthreads();
    TileCursor tile = seek_tile(s, columns, {0, 0});
    if (tile.column < columns) {
      const int n = min(s.column_count[tile.column] - tile.first, T::kKeys);
      issue_tile<kFp8>(s, group_base + s.column_page[tile.column] * p.page_stride + tile.first * p.slot_stride,
                       p.slot_stride, n, 0);
    }
    for (int i = 0; tile.column < columns; ++i) {
      const int n = min(s.column_count[tile.column] - tile.first, T::kKeys);
      const TileCursor next = seek_tile(s, columns, {tile.column, tile.first + T::kKeys});
      ptx::cp_async_wait_all();  // tile i's copies (the only ones in flight)
      __syncthreads();           // ... visible to every warp; tile i - 1's readers are done
      if (next.column < columns) {
        const int next_n = min(s.column_count[next.column] - next.first, T::kKeys);
        issue_tile<kFp8>(s, group_base + s.column_page[next.column] * p.page_stride + next.first * p.slot_stride,
                         p.slot_stride, next_n, (i + 1) % 2);
      }
      int buffer = i % 2;
      if constexpr (kFp8) {
        convert_tile(s, buffer);
        __syncthreads();
        buffer = 0;
      }
      const uint32_t k_base = k_tile_base + buffer * sizeof(typename DsaSmem<kFp8>::KvTile);
      const uint32_t v_base = v_tile_base + buffer * sizeof(typename DsaSmem<kFp8>::KvTile);
      // S = Q K^T for this warp's 16 keys: two n8 tiles.
      float score[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < T::kScoreSteps; ++kk) {
        uint32_t a[4], b[4];
        ptx::ldmatrix_x4(a, q_base + kk * 32);
        ptx::ldmatrix_x4(b, k_base + kk * 32);
        ptx::mma_bf16_16x8x16(score[0], a, b[0], b[1]);
        ptx::mma_bf16_16x8x16(score[1], a, b[2], b[3]);
      }
      // Masked keys (past the region's visible slots) score -inf.
      float top = -INFINITY, bottom = -INFINITY;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool valid = key0 + 8 * j + 2 * t + (e % 2) < n;
          score[j][e] = valid ? score[j][e] * scale_log2 : -INFINITY;
          if (e < 2) top = fmaxf(top, score[j][e]);
          else bottom = fmaxf(bottom, score[j][e]);
        }
#pragma unroll
      for (int offset = 1; offset < 4; offset *= 2) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
        bottom = fmaxf(bottom, __shfl_xor_sync(0xffffffffu, bottom, offset));
      }
      if (t == 0) s.warp_max[warp][g] = top, s.warp_max[warp][g + 8] = bottom;
      __syncthreads();
      float base[2], rescale[2];
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        float tile_max = s.warp_max[0][g + 8 * b];
#pragma unroll
        for (int w = 1; w < T::kWarps; ++w) tile_max = fmaxf(tile_max, s.warp_max[w][g + 8 * b]);
        const float new_max = fmaxf(state.max[b], tile_max);
        base[b] = new_max == -INFINITY ? 0.0f : new_max;  // no key yet: every p is 0
        rescale[b] = exp2f(state.max[b] - base[b]);       // 0 while the max was -inf
        state.max[b] = new_max;
      }
      // P = 2^(S - max): FP16 with FP8 caches (V is FP16), BF16 hi + lo with
      // BF16 caches (16 significant bits; BF16 alone loses the accuracy
      // bound); the sum is over what P V multiplies.
      uint32_t hi[4], lo[4];
      state.sum[0] *= rescale[0], state.sum[1] *= rescale[1];
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // half 0: head g, 1: head g + 8
          const float p0 = exp2f(score[j][2 * half] - base[half]);
          const float p1 = exp2f(score[j][2 * half + 1] - base[half]);
          if constexpr (kFp8) {
            const __half2 h = __floats2half2_rn(p0, p1);
            hi[2 * j + half] = *reinterpret_cast<const uint32_t*>(&h);
            const float2 f = __half22float2(h);
            state.sum[half] += f.x + f.y;
          } else {
            const float h0 = bf16_bits_to_float(float_to_bf16_bits(p0)), h1 = bf16_bits_to_float(float_to_bf16_bits(p1));
            const float l0 = bf16_bits_to_float(float_to_bf16_bits(p0 - h0)), l1 = bf16_bits_to_float(float_to_bf16_bits(p1 - h1));
            hi[2 * j + half] = pack_bf16(h0, h1);
            lo[2 * j + half] = pack_bf16(l0, l1);
            state.sum[half] += (h0 + l0) + (h1 + l1);
          }
        }
#pragma unroll
      for (int d = 0; d < T::kDimTiles; ++d) {
        o[d][0] *= rescale[0], o[d][1] *= rescale[0];
        o[d][2] *= rescale[1], o[d][3] *= rescale[1];
      }
#pragma unroll
      for (int d = 0; d < T::kDimTiles / 2; ++d) {
        uint32_t r[4];
        ptx::ldmatrix_x4_trans(r, v_base + d * 32);
        if constexpr (kFp8) {
          ptx::mma_f16_16x8x16(o[2 * d], hi, r[0], r[1]);
          ptx::mma_f16_16x8x16(o[2 * d + 1], hi, r[2], r[3]);
        } else {
          ptx::mma_bf16_16x8x16(o[2 * d], lo, r[0], r[1]);
          ptx::mma_bf16_16x8x16(o[2 * d + 1], lo, r[2], r[3]);
          ptx::mma_bf16_16x8x16(o[2 * d], hi, r[0], r[1]);
          ptx::mma_bf16_16x8x16(o[2 * d + 1], hi, r[2], r[3]);
        }
      }
      tile = next;
    }
  }
  ptx::launch_dependents();

  // The warps' sums and P V, added in warp order.
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) state.sum[b] += __shfl_xor_sync(0xffffffffu, state.sum[b], offset);
  }
  __syncthreads();  // the last tile's readers are done: tiles become the reduce buffer
  if (t == 0) s.warp_sum[warp][g] = state.sum[0], s.warp_sum[warp][g + 8] = state.sum[1];
  if (warp == 0 && t == 0) s.head_max[g] = state.max[0], s.head_max[g + 8] = state.max[1];
#pragma unroll
  for (int d = 0; d < T::kDimTiles; ++d) {
    *reinterpret_cast<float2*>(&s.tiles.reduce[warp][g][8 * d + 2 * t]) = make_float2(o[d][0], o[d][1]);
    *reinterpret_cast<float2*>(&s.tiles.reduce[warp][g + 8][8 * d + 2 * t]) = make_float2(o[d][2], o[d][3]);
  }
  __syncthreads();

  for (int x = threadIdx.x; x < p.heads * T::kGranules; x += T::kThreads) {
    const int head = x / T::kGranules, dim = (x % T::kGranules) * 4;
    float sum = s.warp_sum[0][head];
    float4 acc = *reinterpret_cast<const float4*>(&s.tiles.reduce[0][head][dim]);
#pragma unroll
    for (int w = 1; w < T::kWarps; ++w) {
      sum += s.warp_sum[w][head];
      const float4 part = *reinterpret_cast<const float4*>(&s.tiles.reduce[w][head][dim]);
      acc.x += part.x, acc.y += part.y, acc.z += part.z, acc.w += part.w;
    }
    // No visible key: exact zeros (and -inf for the combine).
    const float factor = sum > 0.0f ? v_scale / sum : 0.0f;
    const float4 mean = make_float4(acc.x * factor, acc.y * factor, acc.z * factor, acc.w * factor);
    if (p.splits == 1) {
      const float gate = gate_factor(p, row, head);
      store_out4(p.out + row * p.out_row_stride + head * p.out_head_stride + dim,
                 make_float4(mean.x * gate, mean.y * gate, mean.z * gate, mean.w * gate));
    } else {
      const int64_t entry = (row * p.splits + split) * p.heads + head;
      *reinterpret_cast<float4*>(p.partial + entry * T::kDims + dim) = mean;
      if (dim == 0) p.lse[entry] = sum > 0.0f ? (s.head_max[head] + log2f(sum)) * kLn2 : -INFINITY;
    }
  }
}

struct DsaCombineTraits {
  static constexpr int kThreads = 256;
  // A row's (head, granule) pairs over kSlices CTAs, one pair a thread.
  static constexpr int kSlices = (DsaTraits::kHeads * DsaTraits::kGranules + kThreads - 1) / kThreads;
  // Instances by a bound on the splits (4, 8, 16, 32): a thread holds one
  // float4 a split, and a 32-split kernel's 158 registers a thread at every
  // T cost the split kernel its second CTA an SM while the combine's CTAs
  // wait (seventeenth session: T = 128 +3.7 us).
  static constexpr int bound(int splits) { return splits <= 4 ? 4 : splits <= 8 ? 8 : splits <= 16 ? 16 : 32; }
  static_assert(kThreads >= DsaTraits::kHeads, "thread h computes head h's weights");
};

// kSlices CTAs a row, one output granule a thread: merges the row's splits
// in split order, applies the gate and stores BF16; zeroes inactive rows
// when asked (docs/dsa_layout.md). Everything a thread reads (the row's
// flag, every split's lse, the gate inputs, its granule of every split's
// partial) is loaded at once after the dependency wait, one L2 round trip
// (docs/kernels/dsa.md, "Seventeenth session"); the weights then go through
// shared memory.
template <int kMaxSplits>
__global__ void __launch_bounds__(DsaCombineTraits::kThreads) dsa_combine_kernel(const __grid_constant__ DsaParams p) {
  using T = DsaTraits;
  using C = DsaCombineTraits;
  static_assert(kMaxSplits <= kDsaMaxSplits && C::bound(kMaxSplits) == kMaxSplits, "an instance of DsaCombineTraits::bound");
  __shared__ float weight[kMaxSplits][T::kHeads];  // exp(lse_s - max) of each split and head (0: empty)
  __shared__ float factor[T::kHeads];                 // gate / sum of the weights; 0: no key in any split
  const int64_t row = blockIdx.x / C::kSlices;
  const int x = static_cast<int>(blockIdx.x % C::kSlices) * C::kThreads + threadIdx.x;  // (head, granule) pair
  const bool has_granule = x < p.heads * T::kGranules;
  const int head = has_granule ? x / T::kGranules : 0, dim = (x % T::kGranules) * 4;
  ptx::grid_dependency_wait();  // the split kernel's partials are complete and visible
  ptx::launch_dependents();
  // An inactive row's lse and partials are read but not used.
  const int64_t entry0 = row * p.splits * p.heads;  // (split s, head h): entry0 + s * heads + h
  const float* partial = p.partial + (entry0 + head) * T::kDims + dim;
  float4 part[kMaxSplits];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    part[s] = has_granule && s < p.splits
                  ? ptx::load_l2(reinterpret_cast<const float4*>(partial + int64_t{s} * p.heads * T::kDims))
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  constexpr int kLsePerThread = (kMaxSplits * T::kHeads + C::kThreads - 1) / C::kThreads;
  float lse[kLsePerThread];
#pragma unroll
  for (int u = 0; u < kLsePerThread; ++u) {
    const int i = threadIdx.x + u * C::kThreads;
    lse[u] = i < p.splits * p.heads ? ptx::load_l2(p.lse + entry0 + i) : -INFINITY;
  }
  const float gate_x = threadIdx.x < p.heads ? gate_input(p, row, threadIdx.x) : 0.0f;
  const bool active = ptx::load_l2(p.active + row) != 0;
  if (!active && !p.clear_inactive) return;
  if (active) {
#pragma unroll
    for (int u = 0; u < kLsePerThread; ++u) {
      const int i = threadIdx.x + u * C::kThreads;
      if (i < p.splits * p.heads) weight[i / p.heads][i % p.heads] = lse[u];
    }
    __syncthreads();
    if (threadIdx.x < p.heads) {
      const int h = threadIdx.x;
      float max = -INFINITY;
      for (int split = 0; split < p.splits; ++split) max = fmaxf(max, weight[split][h]);
      float total = 0.0f;
      for (int split = 0; split < p.splits; ++split) {
        const float split_lse = weight[split][h];
        const float w = split_lse == -INFINITY ? 0.0f : expf(split_lse - max);  // an empty split weighs 0
        weight[split][h] = w;
        total += w;
      }
      factor[h] = max == -INFINITY ? 0.0f : gate_of(p, gate_x) / total;
    }
    __syncthreads();
  }
  if (!has_granule) return;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (active && factor[head] != 0.0f) {
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s >= p.splits) break;
      const float w = weight[s][head];
      acc.x += w * part[s].x, acc.y += w * part[s].y, acc.z += w * part[s].z, acc.w += w * part[s].w;
    }
    const float f = factor[head];
    acc = make_float4(acc.x * f, acc.y * f, acc.z * f, acc.w * f);
  }
  store_out4(p.out + row * p.out_row_stride + head * p.out_head_stride + dim, acc);
}

}  // namespace sparse_decode::dsa
