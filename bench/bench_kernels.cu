#include "bench/bench_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "bench/cuda_check.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::bench {
namespace {

constexpr int kFillThreads = 256;
constexpr int kGatherWarps = 8;  // warps per thread block of the gather
constexpr int kGatherThreads = kGatherWarps * 32;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A random byte to an E4M3 code with exponent field 4..8 (never zero, never
// NaN): values of either sign in [1/8, 3.75], so scores of 512-dim dots stay
// in a range where the softmax is neither flat nor one-hot.
__device__ __forceinline__ uint32_t random_e4m3(uint32_t random_byte) {
  const uint32_t sign = random_byte & 0x80u;
  const uint32_t exponent = 4u + ((random_byte >> 3) & 0xFu) % 5u;
  const uint32_t mantissa = random_byte & 0x7u;
  return sign | (exponent << 3) | mantissa;
}

__device__ __forceinline__ uint32_t random_e4m3x4(uint32_t random_bits) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) word |= random_e4m3((random_bits >> (8 * i)) & 0xFFu) << (8 * i);
  return word;
}

// The BF16 bits of the E4M3 value of random_e4m3(random_byte): the same
// sign, exponent and 3 mantissa bits.
__device__ __forceinline__ uint32_t random_bf16(uint32_t random_byte) {
  const uint32_t code = random_e4m3(random_byte);
  const uint32_t exponent = ((code >> 3) & 0xFu) - 7u + 127u;
  return ((code & 0x80u) << 8) | (exponent << 7) | ((code & 0x7u) << 4);
}

__device__ __forceinline__ uint32_t random_bf16x2(uint32_t random_bits) {
  return random_bf16(random_bits & 0xFFu) | (random_bf16((random_bits >> 8) & 0xFFu) << 16);
}

// Each thread writes 16-byte pieces, grid-stride; the tail (< 16 bytes) byte by byte.
__global__ void fill_random_e4m3_kernel(uint8_t* data, size_t bytes, uint64_t seed) {
  const size_t pieces = bytes / 16;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pieces; i += stride) {
    const uint64_t a = splitmix64(seed ^ (2 * i)), b = splitmix64(seed ^ (2 * i + 1));
    const uint4 piece = {random_e4m3x4(static_cast<uint32_t>(a)), random_e4m3x4(static_cast<uint32_t>(a >> 32)),
                         random_e4m3x4(static_cast<uint32_t>(b)), random_e4m3x4(static_cast<uint32_t>(b >> 32))};
    reinterpret_cast<uint4*>(data)[i] = piece;
  }
  const size_t tail = pieces * 16 + blockIdx.x * blockDim.x + threadIdx.x;
  if (tail < bytes) data[tail] = static_cast<uint8_t>(random_e4m3(static_cast<uint32_t>(splitmix64(seed ^ ~tail))));
}

// 16-byte pieces of 8 BF16 values, grid-stride; a tail of an odd byte count is left as it is.
__global__ void fill_random_bf16_kernel(uint16_t* data, size_t elements, uint64_t seed) {
  const size_t pieces = elements / 8;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pieces; i += stride) {
    const uint64_t a = splitmix64(seed ^ (2 * i));
    const uint4 piece = {random_bf16x2(static_cast<uint32_t>(a)), random_bf16x2(static_cast<uint32_t>(a >> 16)),
                         random_bf16x2(static_cast<uint32_t>(a >> 32)), random_bf16x2(static_cast<uint32_t>(a >> 48))};
    reinterpret_cast<uint4*>(data)[i] = piece;
  }
  const size_t tail = pieces * 8 + blockIdx.x * blockDim.x + threadIdx.x;
  if (tail < elements) data[tail] = static_cast<uint16_t>(random_bf16(static_cast<uint32_t>(splitmix64(seed ^ ~tail))));
}

// Packed pools, 16-byte pieces, grid-stride: each piece lies wholly in the
// E4M3 bytes, the BF16 dims or the scale bytes of a page (448, 576 and
// page_size * 576 are multiples of 16).
__global__ void fill_random_packed_kernel(uint8_t* data, size_t pieces, int64_t page_size, int64_t page_stride,
                                          uint32_t scale_min, uint32_t scale_span, uint64_t seed) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pieces; i += stride) {
    const uint64_t a = splitmix64(seed ^ (2 * i)), b = splitmix64(seed ^ (2 * i + 1));
    const int64_t in_page = static_cast<int64_t>(i * 16) % page_stride;
    uint4 piece;
    if (in_page >= page_size * kPackedDataBytes) {  // scale bytes (and the page's padding, if any)
      uint32_t words[4];
      for (int w = 0; w < 4; ++w) {
        const uint32_t bits = static_cast<uint32_t>((w < 2 ? a : b) >> (32 * (w % 2)));
        words[w] = 0;
        for (int k = 0; k < 4; ++k) words[w] |= (scale_min + ((bits >> (8 * k)) & 0xFFu) % scale_span) << (8 * k);
      }
      piece = {words[0], words[1], words[2], words[3]};
    } else if (in_page % kPackedDataBytes >= kPackedFp8Dims) {  // the 64 BF16 dims
      piece = {random_bf16x2(static_cast<uint32_t>(a)), random_bf16x2(static_cast<uint32_t>(a >> 16)),
               random_bf16x2(static_cast<uint32_t>(a >> 32)), random_bf16x2(static_cast<uint32_t>(a >> 48))};
    } else {
      piece = {random_e4m3x4(static_cast<uint32_t>(a)), random_e4m3x4(static_cast<uint32_t>(a >> 32)),
               random_e4m3x4(static_cast<uint32_t>(b)), random_e4m3x4(static_cast<uint32_t>(b >> 32))};
    }
    reinterpret_cast<uint4*>(data)[i] = piece;
  }
}

// Where a row's bytes start: plain rows `row_bytes` apart, or a packed row's
// data bytes (and, in *scales, its scale bytes) within its page.
template <bool kPacked>
__device__ __forceinline__ const uint8_t* row_address(const GatherLayer& layer, const uint8_t* pool, int64_t index,
                                                      const uint8_t** scales) {
  if constexpr (kPacked) {
    const uint8_t* page = pool + index / layer.page_size * layer.page_stride;
    const int64_t slot = index % layer.page_size;
    *scales = page + layer.page_size * kPackedDataBytes + slot * kPackedScaleBytes;
    return page + slot * kPackedDataBytes;
  } else {
    return pool + index * layer.row_bytes;
  }
}

// Warp w of the grid reads the rows of columns kRows*w .. kRows*w + kRows-1
// (of all tokens, flattened): lanes 0..kRows-1 load the indices in one load,
// then every lane issues its 16-byte load of each row before using any.
// kPacked: a row is 36 16-byte pieces (lanes 0..3 load a second one) and
// lane 31 also loads its 8 scale bytes.
template <int kRows, int kLoadsPerLane, bool kPacked>
__global__ void __launch_bounds__(kGatherThreads) gather_rows_kernel(GatherLayer layer) {
  constexpr int kPieces = kPacked ? kPackedDataBytes / 16 : 32 * kLoadsPerLane;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first_column = (int64_t{blockIdx.x} * kGatherWarps + warp) * kRows;
  const uint8_t* my_row = nullptr;  // lane i < kRows: the row of column first_column + i, null if not read
  const uint8_t* my_scales = nullptr;  // packed: its scale bytes
  if (lane < kRows && first_column + lane < layer.tokens * layer.width) {
    const int64_t token = (first_column + lane) / layer.width;
    const int32_t column = static_cast<int32_t>((first_column + lane) % layer.width);
    const int32_t index = layer.indices[token * layer.indices_stride + column];
    const bool swa = column < kSwaColumns;
    if (index >= 0 && index < (swa ? layer.swa_rows : layer.compressed_rows)) {
      my_row = row_address<kPacked>(layer, swa ? layer.swa : layer.compressed, index, &my_scales);
    }
  }
  uint4 pieces[kRows][kLoadsPerLane];
  uint2 scales[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const auto* row = reinterpret_cast<const uint4*>(__shfl_sync(0xFFFFFFFFu, reinterpret_cast<uintptr_t>(my_row), i));
#pragma unroll
    for (int j = 0; j < kLoadsPerLane; ++j) {
      const bool load = row && lane + 32 * j < kPieces;
      pieces[i][j] = load ? __ldcg(row + lane + 32 * j) : make_uint4(0u, 0u, 0u, 0u);  // L2 only, like cp.async.cg
    }
    scales[i] = make_uint2(0u, 0u);
    if constexpr (kPacked) {
      const auto* row_scales =
          reinterpret_cast<const uint2*>(__shfl_sync(0xFFFFFFFFu, reinterpret_cast<uintptr_t>(my_scales), i));
      if (row_scales && lane == 31) scales[i] = __ldcg(row_scales);
    }
  }
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    word ^= scales[i].x ^ scales[i].y;
#pragma unroll
    for (int j = 0; j < kLoadsPerLane; ++j) word ^= pieces[i][j].x ^ pieces[i][j].y ^ pieces[i][j].z ^ pieces[i][j].w;
  }
  // XOR of everything the block read: one word a block, so that the loads
  // cannot be dropped while the stores stay a rounding error of the traffic.
  word = __reduce_xor_sync(0xFFFFFFFFu, word);
  __shared__ uint32_t warp_words[kGatherWarps];
  if (lane == 0) warp_words[warp] = word;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kGatherWarps; ++w) word ^= warp_words[w];
    layer.checksum[blockIdx.x] = word;  // thread 0 holds warp 0's word
  }
}

template <int kLoadsPerLane, bool kPacked = false>
void launch_gather(const GatherLayer& layer, int rows_per_warp, unsigned grid, CUstream_st* stream) {
  switch (rows_per_warp) {
    case 1: gather_rows_kernel<1, kLoadsPerLane, kPacked><<<grid, kGatherThreads, 0, stream>>>(layer); break;
    case 2: gather_rows_kernel<2, kLoadsPerLane, kPacked><<<grid, kGatherThreads, 0, stream>>>(layer); break;
    case 4: gather_rows_kernel<4, kLoadsPerLane, kPacked><<<grid, kGatherThreads, 0, stream>>>(layer); break;
    case 8: gather_rows_kernel<8, kLoadsPerLane, kPacked><<<grid, kGatherThreads, 0, stream>>>(layer); break;
    default: throw std::invalid_argument("gather rows_per_warp must be 1, 2, 4 or 8");
  }
}

}  // namespace

void fill_random_e4m3(void* data, size_t bytes, uint64_t seed, CUstream_st* stream) {
  if (bytes == 0) return;
  const size_t pieces = std::max<size_t>(bytes / 16, 1);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((pieces + kFillThreads - 1) / kFillThreads, 65536));
  fill_random_e4m3_kernel<<<blocks, kFillThreads, 0, stream>>>(static_cast<uint8_t*>(data), bytes, seed);
  SPARSE_DECODE_CUDA_CHECK(cudaGetLastError());
}

void fill_random_bf16(void* data, size_t bytes, uint64_t seed, CUstream_st* stream) {
  const size_t elements = bytes / 2;
  if (elements == 0) return;
  const size_t pieces = std::max<size_t>(elements / 8, 1);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((pieces + kFillThreads - 1) / kFillThreads, 65536));
  fill_random_bf16_kernel<<<blocks, kFillThreads, 0, stream>>>(static_cast<uint16_t*>(data), elements, seed);
  SPARSE_DECODE_CUDA_CHECK(cudaGetLastError());
}

void fill_random_packed(void* data, int64_t pages, int64_t page_size, int64_t page_stride, int scale_min,
                        int scale_max, uint64_t seed, CUstream_st* stream) {
  if (page_size < 1 || page_stride < page_size * kPackedRowBytes || page_stride % 16 != 0) {
    throw std::invalid_argument("fill_random_packed: page_stride must be >= page_size * 584 and a multiple of 16");
  }
  if (scale_min < 1 || scale_max < scale_min || scale_max > 254) {
    throw std::invalid_argument("fill_random_packed: scale bytes must lie in [1, 254]");
  }
  const size_t pieces = static_cast<size_t>(pages * page_stride / 16);
  if (pieces == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((pieces + kFillThreads - 1) / kFillThreads, 65536));
  fill_random_packed_kernel<<<blocks, kFillThreads, 0, stream>>>(static_cast<uint8_t*>(data), pieces, page_size,
                                                                 page_stride, static_cast<uint32_t>(scale_min),
                                                                 static_cast<uint32_t>(scale_max - scale_min + 1), seed);
  SPARSE_DECODE_CUDA_CHECK(cudaGetLastError());
}

int64_t gather_checksum_words(int64_t tokens, int32_t width, int rows_per_warp) {
  const int64_t columns_per_block = int64_t{kGatherWarps} * rows_per_warp;
  return (tokens * width + columns_per_block - 1) / columns_per_block;
}

bool valid_gather_rows_per_warp(int rows_per_warp) {
  return rows_per_warp == 1 || rows_per_warp == 2 || rows_per_warp == 4 || rows_per_warp == 8;
}

void launch_gather_rows(const GatherLayer& layer, int rows_per_warp, CUstream_st* stream) {
  const int64_t blocks = gather_checksum_words(layer.tokens, layer.width, rows_per_warp);
  if (blocks == 0) return;
  if (layer.read_bytes == kPackedRowBytes) {
    if (layer.page_size < 1 || layer.page_stride < layer.page_size * kPackedRowBytes) {
      throw std::invalid_argument("gather of packed rows needs page_size >= 1 and page_stride >= page_size * 584");
    }
    launch_gather<2, true>(layer, rows_per_warp, static_cast<unsigned>(blocks), stream);
  } else if (layer.read_bytes != 512 && layer.read_bytes != 1024) {
    throw std::invalid_argument("gather reads 512, 1024 or 584 (packed) bytes a row");
  } else if (layer.read_bytes == 1024) {
    launch_gather<2>(layer, rows_per_warp, static_cast<unsigned>(blocks), stream);
  } else {
    launch_gather<1>(layer, rows_per_warp, static_cast<unsigned>(blocks), stream);
  }
  SPARSE_DECODE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sparse_decode::bench
