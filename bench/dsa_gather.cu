#include "bench/dsa_gather.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "bench/cuda_check.h"

namespace sparse_decode::bench {
namespace {

constexpr int kThreads = 128;

int64_t chunks_per_region(int32_t block_size, int32_t slot_bytes, int loads) {
  const int64_t pieces = int64_t{block_size} * (slot_bytes / 16);
  const int64_t per_block = int64_t{kThreads} * loads;
  return (pieces + per_block - 1) / per_block;
}

// blockIdx.x: (row, region column) = (x / R, x % R); blockIdx.y: which
// kThreads * kLoads pieces of the region's visible slots (piece p: slot
// p / kPiecesPerSlot, 16 bytes at (p % kPiecesPerSlot) * 16 of it).
template <int kPiecesPerSlot, int kLoads>
__global__ void __launch_bounds__(kThreads) dsa_gather_kernel(DsaGatherLayer g) {
  const int64_t row = blockIdx.x / g.num_regions;
  const int32_t column = static_cast<int32_t>(blockIdx.x % g.num_regions);
  const uint8_t* base = nullptr;
  int64_t pieces = 0;
  if (g.active[row] != 0) {
    const int32_t block = g.regions[row * g.regions_stride + column];
    const int64_t position = g.positions[row];
    const int64_t first = int64_t{block} * g.block_size;
    if (block >= 0 && block < g.max_blocks && first <= position) {
      const int64_t request = row / (int64_t{g.groups} * g.query_len);
      const int32_t page = g.block_table[request * g.block_table_stride + block];
      if (page >= 0 && page < g.num_pages) {
        const int64_t visible = position - first + 1 < g.block_size ? position - first + 1 : g.block_size;
        base = g.cache + page * g.page_stride_bytes + (row % g.groups) * g.group_stride_bytes;
        pieces = visible * kPiecesPerSlot;
      }
    }
  }
  const int64_t first_piece = int64_t{blockIdx.y} * kThreads * kLoads + threadIdx.x;
  uint4 values[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int64_t piece = first_piece + i * kThreads;
    if (piece < pieces) {
      const int64_t slot = piece / kPiecesPerSlot;
      const int64_t offset = piece % kPiecesPerSlot;
      values[i] = __ldcg(reinterpret_cast<const uint4*>(base + slot * g.slot_stride_bytes) + offset);  // L2 only, like cp.async.cg
    } else {
      values[i] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) word ^= values[i].x ^ values[i].y ^ values[i].z ^ values[i].w;
  // One word a thread block, so that the loads cannot be dropped while the
  // stores stay a rounding error of the traffic.
  word = __reduce_xor_sync(0xFFFFFFFFu, word);
  __shared__ uint32_t warp_words[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_words[warp] = word;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) word ^= warp_words[w];
    g.checksum[int64_t{blockIdx.y} * gridDim.x + blockIdx.x] = word;
  }
}

template <int kPiecesPerSlot>
void launch(const DsaGatherLayer& g, int loads, dim3 grid, CUstream_st* stream) {
  switch (loads) {
    case 2: dsa_gather_kernel<kPiecesPerSlot, 2><<<grid, kThreads, 0, stream>>>(g); break;
    case 4: dsa_gather_kernel<kPiecesPerSlot, 4><<<grid, kThreads, 0, stream>>>(g); break;
    case 8: dsa_gather_kernel<kPiecesPerSlot, 8><<<grid, kThreads, 0, stream>>>(g); break;
    default: throw std::invalid_argument("dsa gather: loads a thread must be 2, 4 or 8");
  }
}

}  // namespace

int64_t dsa_gather_checksum_words(int64_t rows, int32_t num_regions, int32_t block_size, int32_t slot_bytes,
                                  int loads) {
  if (loads < 1 || slot_bytes < 16) throw std::invalid_argument("dsa gather: loads >= 1 and slot_bytes >= 16");
  return rows * num_regions * chunks_per_region(block_size, slot_bytes, loads);
}

void launch_dsa_gather(const DsaGatherLayer& g, int loads, CUstream_st* stream) {
  if (loads != 2 && loads != 4 && loads != 8) throw std::invalid_argument("dsa gather: loads a thread must be 2, 4 or 8");
  if (g.slot_bytes != 384 && g.slot_bytes != 768) throw std::invalid_argument("dsa gather: slot_bytes must be 384 or 768");
  if (g.block_size < 1 || g.num_regions < 1 || g.groups < 1 || g.query_len < 1) {
    throw std::invalid_argument("dsa gather: block_size, num_regions, groups and query_len must be >= 1");
  }
  const int64_t blocks = g.rows * g.num_regions;
  if (blocks == 0) return;
  const int64_t chunks = chunks_per_region(g.block_size, g.slot_bytes, loads);
  if (blocks > 0x7FFFFFFF || chunks > 65535) throw std::invalid_argument("dsa gather: grid too large");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(chunks));
  if (g.slot_bytes == 384) {
    launch<24>(g, loads, grid, stream);
  } else {
    launch<48>(g, loads, grid, stream);
  }
  SPARSE_DECODE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sparse_decode::bench
