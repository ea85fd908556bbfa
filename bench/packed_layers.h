// The data of `sparse-decode bench --layout packed`: two pools of packed
// 584-byte rows on the device (SPEC section 2, pages of 64 rows), one region
// of each per layer, and L layers that each have their own q, indices, lens,
// sinks and output, so that a graph of L dsv4_decode_packed calls reads its
// rows from DRAM as a real model does.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/bench_kernels.h"
#include "bench/bench_layers.h"
#include "sparse_decode/dsv4_decode_packed.h"
#include "testing/device_buffer.h"

namespace sparse_decode::bench {

inline constexpr int64_t kPackedBenchPageStride = kBenchPageSize * kPackedRowBytes;  // 37376 bytes, contiguous pages
// UE8M0 scale bytes 124..130 (2^-3..2^3): times the E4M3 magnitudes 1/8..3.75
// of fill_random_packed, tiles decode to 1/64..30, the range of an RMS-normalized
// latent quantized as DeepSeek-V4 does (whose E4M3 bytes reach 448 and whose
// scales are 2^7 smaller).
inline constexpr int kPackedBenchScaleMin = 124;
inline constexpr int kPackedBenchScaleMax = 130;

// The SWA and extra pools, split into `layers` regions of whole pages. Layer
// 0's regions are also copied to the host once, for the accuracy check.
class PackedPools {
 public:
  PackedPools(size_t swa_bytes, size_t extra_bytes, int layers, uint64_t seed, CUstream_st* stream);

  PackedPool swa_region(int layer) const { return region(swa_.as<uint8_t>(), swa_region_pages_, layer); }
  PackedPool extra_region(int layer) const { return region(extra_.as<uint8_t>(), extra_region_pages_, layer); }
  // Layer 0's regions on the host: the same geometry, so the same indices.
  PackedPool host_swa_region0() const { return region(host_swa0_.data(), swa_region_pages_, 0); }
  PackedPool host_extra_region0() const { return region(host_extra0_.data(), extra_region_pages_, 0); }
  int layers() const { return layers_; }
  size_t total_bytes() const { return swa_.bytes() + extra_.bytes(); }

 private:
  static PackedPool region(const uint8_t* pool, int64_t region_pages, int layer);

  int layers_;
  int64_t swa_region_pages_, extra_region_pages_;
  testing::DeviceBuffer swa_, extra_;
  std::vector<uint8_t> host_swa0_, host_extra0_;
};

// One layer: the SWA columns and the W - 128 extra columns of a token are one
// row [W] of `indices` (the extra segment starts at column 128, the same
// stride), so make_layer_indices draws them and the gather reads them as it
// reads the plain layout's.
struct PackedBenchLayer {
  testing::DeviceBuffer q, indices, swa_lens, extra_lens, sinks, out, checksum;
  Dsv4PackedDecodeArgs args;
  GatherLayer gather;
};

class PackedBenchLayers {
 public:
  // shape.width: 128 SWA columns plus width - 128 extra ones (width 128: no extra segment).
  PackedBenchLayers(const PackedPools& pools, const BenchShape& shape, uint64_t seed, CUstream_st* stream);

  int count() const { return static_cast<int>(layers_.size()); }
  const PackedBenchLayer& layer(int i) const { return layers_[i]; }
  // --kernel auto, cluster, stream, split, stream_h64 or split_h64: the same values.
  void set_kernel(Dsv4Kernel kernel) {
    for (PackedBenchLayer& l : layers_) l.args.kernel = static_cast<Dsv4PackedKernel>(kernel);
  }
  void set_batch_invariant(bool on) {  // --batch-invariant
    for (PackedBenchLayer& l : layers_) l.args.batch_invariant = on;
  }

  // Bytes one layer moves at the least: T * W rows of 584 bytes, q and out (both BF16).
  int64_t gathered_bytes_per_layer() const;

 private:
  PackedBenchLayer make_layer(const PackedPools& pools, int index, uint64_t seed, CUstream_st* stream) const;

  BenchShape shape_;
  std::vector<PackedBenchLayer> layers_;
};

}  // namespace sparse_decode::bench
