// The data of one benchmark shape: two large FP8 or BF16 pools on the device, one
// region of each per layer, and L layers that each have their own q, indices
// and output, so that a graph of L decode calls reads its rows from DRAM as a
// real model does.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/bench_indices.h"
#include "bench/bench_kernels.h"
#include "sparse_decode/dsv4_decode.h"
#include "testing/device_buffer.h"

namespace sparse_decode::bench {

// The SWA and compressed pools, filled on the device with random non-zero
// E4M3 values (as E4M3 or BF16 elements) and split into `layers` equal
// regions of whole pages.
class KvPools {
 public:
  KvPools(size_t swa_bytes, size_t compressed_bytes, int layers, DType dtype, uint64_t seed, CUstream_st* stream);

  KvPool swa_region(int layer) const { return region(swa_, swa_region_rows_, layer); }
  KvPool compressed_region(int layer) const { return region(compressed_, compressed_region_rows_, layer); }
  int64_t swa_region_rows() const { return swa_region_rows_; }
  int64_t compressed_region_rows() const { return compressed_region_rows_; }
  size_t total_bytes() const { return swa_.bytes() + compressed_.bytes(); }
  int layers() const { return layers_; }
  DType dtype() const { return dtype_; }
  int64_t row_bytes() const { return row_bytes_; }

 private:
  KvPool region(const testing::DeviceBuffer& pool, int64_t region_rows, int layer) const;

  int layers_;
  DType dtype_;
  int64_t row_bytes_;
  int64_t swa_region_rows_, compressed_region_rows_;
  testing::DeviceBuffer swa_, compressed_;
};

// Sink logits [heads] drawn from N(0, 1).
std::vector<float> random_sinks(int32_t heads, uint64_t seed);

// One layer: its own q, indices, sinks and output, its decode arguments on
// device memory, and the same reads as a GatherLayer.
struct BenchLayer {
  testing::DeviceBuffer q, indices, sinks, out, checksum;
  Dsv4DecodeArgs args;
  GatherLayer gather;
  int64_t active_rows = 0;  // columns whose row is read
};

class BenchLayers {
 public:
  BenchLayers(const KvPools& pools, const BenchShape& shape, uint64_t seed, CUstream_st* stream);

  const BenchShape& shape() const { return shape_; }
  int count() const { return static_cast<int>(layers_.size()); }
  const BenchLayer& layer(int i) const { return layers_[i]; }

  // Bytes one layer moves at the least: its active rows, q (both of the pools' dtype) and out (BF16).
  int64_t gathered_bytes_per_layer() const;
  int64_t active_rows_per_layer() const;  // the mean over layers (they are equal here)

 private:
  BenchLayer make_layer(const KvPools& pools, int index, uint64_t seed, CUstream_st* stream);

  BenchShape shape_;
  std::vector<BenchLayer> layers_;
};

}  // namespace sparse_decode::bench
