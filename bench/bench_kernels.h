// Device kernels of the harness: filling the large pools with random FP8 or
// BF16 on the device (no GiB host buffers), and the plain row gather that is
// the bandwidth reference of every timed shape.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode::bench {

// Writes random non-zero finite E4M3 bytes (magnitudes 1/8 .. 3.75, random
// sign) to `bytes` bytes at `data`, a pure function of `seed` and the offset.
void fill_random_e4m3(void* data, size_t bytes, uint64_t seed, CUstream_st* stream);
// The same values as BF16 (exact: an E4M3 value has 4 significant bits),
// `bytes` / 2 elements.
void fill_random_bf16(void* data, size_t bytes, uint64_t seed, CUstream_st* stream);

// Writes pools of packed 584-byte rows (SPEC section 2; `pages` pages of
// `page_size` rows, `page_stride` bytes apart, a multiple of 16): random
// non-zero E4M3 bytes as fill_random_e4m3 draws them, BF16 dims of the same
// values, and scale bytes (the padding byte too) uniform in
// [scale_min, scale_max], never 0.
void fill_random_packed(void* data, int64_t pages, int64_t page_size, int64_t page_stride, int scale_min,
                        int scale_max, uint64_t seed, CUstream_st* stream);

// One layer's reads for the gather kernel: the same indices and pools as the
// layer's decode call. Plain pools hold contiguous rows `row_bytes` apart;
// packed pools (read_bytes 584) hold pages of `page_size` rows `page_stride`
// bytes apart, each row's 576 data bytes and 8 scale bytes where SPEC section
// 2 puts them.
struct GatherLayer {
  const int32_t* indices = nullptr;  // [tokens, width]; -1 or out of range = not read
  int64_t tokens = 0;
  int32_t width = 0;
  int64_t indices_stride = 0;  // elements between tokens
  const uint8_t* swa = nullptr;
  int64_t swa_rows = 0;
  const uint8_t* compressed = nullptr;
  int64_t compressed_rows = 0;
  int64_t row_bytes = 512;        // bytes between rows
  int64_t read_bytes = 512;       // bytes read of each row: 512 (FP8), 1024 (BF16) or 584 (packed)
  int64_t page_size = 0;          // packed: rows a page
  int64_t page_stride = 0;        // packed: bytes between pages
  uint32_t* checksum = nullptr;   // [gather_checksum_words(tokens, width, 1)]: XOR of each block's bytes
};

// Words of GatherLayer::checksum that a layer needs (one per thread block).
int64_t gather_checksum_words(int64_t tokens, int32_t width, int rows_per_warp);

// The rows-per-warp counts that launch_gather_rows serves: 1, 2, 4, 8.
inline constexpr int kGatherRowsPerWarpChoices[] = {1, 2, 4, 8};
bool valid_gather_rows_per_warp(int rows_per_warp);

// Each warp loads the indices of `rows_per_warp` columns (t, c) in one load,
// then each 512-byte (1024-byte) row with one (two) 16-byte loads per lane
// (a packed row: 36 16-byte loads and one 8-byte load of its scales), all in flight at
// once: the dependent index-then-row chain that every decode kernel pays.
// One row a warp is fastest at small T (more warps), 4 at large T (more
// bytes in flight). Throws on a launch error; safe while capturing a stream.
void launch_gather_rows(const GatherLayer& layer, int rows_per_warp, CUstream_st* stream);

}  // namespace sparse_decode::bench
