// The bandwidth reference of `sparse-decode bench --layout dsa`: a plain
// kernel that reads exactly the cache slots a dsa_decode call reads (the K and
// V of every visible key of every active row's regions), through the same
// dependent chain (row's region id, then its block-table entry, then the
// slots), with 16-byte loads, and does nothing else with them.
#pragma once

#include <cstdint>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace sparse_decode::bench {

// One layer's reads: the pointers and strides of the layer's DsaDecodeArgs,
// with the cache strides in bytes.
struct DsaGatherLayer {
  int64_t rows = 0;
  int32_t groups = 1;
  int32_t query_len = 1;
  const int32_t* regions = nullptr;  // [rows, regions_stride]
  int64_t regions_stride = 0;
  int32_t num_regions = 0;
  const int32_t* block_table = nullptr;  // [requests, block_table_stride]
  int64_t block_table_stride = 0;
  int32_t max_blocks = 0;
  const int32_t* positions = nullptr;  // [rows]
  const int32_t* active = nullptr;     // [rows]
  const uint8_t* cache = nullptr;
  int64_t num_pages = 0;
  int32_t block_size = 0;
  int64_t page_stride_bytes = 0;
  int64_t group_stride_bytes = 0;
  int64_t slot_stride_bytes = 0;
  int32_t slot_bytes = 0;        // bytes read of a slot (K + V): 384 (FP8) or 768 (BF16)
  uint32_t* checksum = nullptr;  // [dsa_gather_checksum_words(...)]: XOR of each thread block's bytes
};

// The variants of the gather: 16-byte loads each thread keeps in flight
// (a thread block of 128 threads covers 128 x loads pieces of one region).
inline constexpr int kDsaGatherLoadChoices[] = {2, 4, 8};

// Words of DsaGatherLayer::checksum that a layer needs with `loads` loads a
// thread (one a thread block; the most with the fewest loads).
int64_t dsa_gather_checksum_words(int64_t rows, int32_t num_regions, int32_t block_size, int32_t slot_bytes, int loads);

// One thread block a (row, region column, piece of the region): it resolves
// the region's page as dsa_decode does (inactive rows, masked ids, blocks past
// the row's position and pages out of range read nothing), then reads the
// visible slots' K and V with `loads` 16-byte loads a thread, all in flight
// at once, and writes the XOR of what it read. Throws on a launch error; safe
// while capturing a stream.
void launch_dsa_gather(const DsaGatherLayer& layer, int loads, CUstream_st* stream);

}  // namespace sparse_decode::bench
