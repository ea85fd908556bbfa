#include "bench/packed_layers.h"

#include <cmath>
#include <stdexcept>

#include "bench/cuda_check.h"

namespace sparse_decode::bench {
namespace {

int64_t region_pages_for(size_t pool_bytes, int layers) {
  return static_cast<int64_t>(pool_bytes / kPackedBenchPageStride / layers);
}

}  // namespace

PackedPools::PackedPools(size_t swa_bytes, size_t extra_bytes, int layers, uint64_t seed, CUstream_st* stream)
    : layers_(layers),
      swa_region_pages_(region_pages_for(swa_bytes, layers)),
      extra_region_pages_(region_pages_for(extra_bytes, layers)),
      swa_(static_cast<size_t>(swa_region_pages_ * layers * kPackedBenchPageStride)),
      extra_(static_cast<size_t>(extra_region_pages_ * layers * kPackedBenchPageStride)) {
  if (swa_region_pages_ < 1 || extra_region_pages_ < 1) throw std::runtime_error("packed pools too small for the layers");
  fill_random_packed(swa_.get(), swa_region_pages_ * layers, kBenchPageSize, kPackedBenchPageStride,
                     kPackedBenchScaleMin, kPackedBenchScaleMax, seed, stream);
  fill_random_packed(extra_.get(), extra_region_pages_ * layers, kBenchPageSize, kPackedBenchPageStride,
                     kPackedBenchScaleMin, kPackedBenchScaleMax, seed + 1, stream);
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
  host_swa0_ = download<uint8_t>(swa_.get(), static_cast<size_t>(swa_region_pages_ * kPackedBenchPageStride));
  host_extra0_ = download<uint8_t>(extra_.get(), static_cast<size_t>(extra_region_pages_ * kPackedBenchPageStride));
}

PackedPool PackedPools::region(const uint8_t* pool, int64_t region_pages, int layer) {
  return PackedPool{pool + layer * region_pages * kPackedBenchPageStride, region_pages, kBenchPageSize,
                    kPackedBenchPageStride};
}

PackedBenchLayers::PackedBenchLayers(const PackedPools& pools, const BenchShape& shape, uint64_t seed,
                                     CUstream_st* stream)
    : shape_(shape) {
  if (shape.width < kSwaColumns || shape.width % 4 != 0) {
    throw std::invalid_argument("packed bench: width must be >= 128 and a multiple of 4");
  }
  layers_.reserve(static_cast<size_t>(pools.layers()));
  for (int i = 0; i < pools.layers(); ++i) layers_.push_back(make_layer(pools, i, seed + 1000003ull * i, stream));
  // The uploads ran synchronously, the q fills and output memsets on `stream`.
  SPARSE_DECODE_CUDA_CHECK(cudaDeviceSynchronize());
}

PackedBenchLayer PackedBenchLayers::make_layer(const PackedPools& pools, int index, uint64_t seed,
                                               CUstream_st* stream) const {
  const BenchShape& s = shape_;
  const int32_t extra_width = s.width - kSwaColumns;
  const PackedPool swa = pools.swa_region(index);
  const PackedPool extra = pools.extra_region(index);
  const auto tokens = static_cast<size_t>(s.tokens);

  PackedBenchLayer layer;
  layer.indices = testing::DeviceBuffer(make_layer_indices(s, swa.rows(), extra.rows(), seed));
  layer.swa_lens = testing::DeviceBuffer(std::vector<int32_t>(tokens, kSwaColumns));
  layer.extra_lens = testing::DeviceBuffer(std::vector<int32_t>(tokens, extra_width));
  layer.q = testing::DeviceBuffer(static_cast<size_t>(s.tokens * s.heads * kHeadDim * 2));
  fill_random_bf16(layer.q.get(), layer.q.bytes(), seed ^ 0x51u, stream);
  layer.sinks = testing::DeviceBuffer(random_sinks(s.heads, seed ^ 0x5Eu));
  layer.out = testing::DeviceBuffer(static_cast<size_t>(s.tokens * s.heads * kHeadDim * 2));
  layer.out.fill_bytes(0xFF, stream);  // BF16 NaN: an element the kernel never writes fails the check
  layer.checksum = testing::DeviceBuffer(static_cast<size_t>(gather_checksum_words(s.tokens, s.width, 1) * 4));

  Dsv4PackedDecodeArgs& a = layer.args;
  a.memory = MemorySpace::kDevice;
  a.num_tokens = s.tokens;
  a.num_heads = s.heads;
  a.q = layer.q.get();
  a.q_token_stride = int64_t{s.heads} * kHeadDim;
  a.swa = PackedSegment{swa, layer.indices.as<int32_t>(), kSwaColumns, s.width, layer.swa_lens.as<int32_t>()};
  if (extra_width > 0) {
    a.extra = PackedSegment{extra, layer.indices.as<int32_t>() + kSwaColumns, extra_width, s.width,
                            layer.extra_lens.as<int32_t>()};
  }
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(double{kHeadDim}));
  a.sinks = layer.sinks.as<float>();
  a.out = layer.out.get();
  a.out_token_stride = int64_t{s.heads} * kHeadDim;
  a.enable_pdl = s.enable_pdl;

  GatherLayer& g = layer.gather;
  g.indices = layer.indices.as<int32_t>();
  g.tokens = s.tokens;
  g.width = s.width;
  g.indices_stride = s.width;
  g.swa = swa.data;
  g.swa_rows = swa.rows();
  g.compressed = extra_width > 0 ? extra.data : nullptr;
  g.compressed_rows = extra_width > 0 ? extra.rows() : 0;
  g.row_bytes = kPackedRowBytes;
  g.read_bytes = kPackedRowBytes;
  g.page_size = kBenchPageSize;
  g.page_stride = kPackedBenchPageStride;
  g.checksum = layer.checksum.as<uint32_t>();
  return layer;
}

int64_t PackedBenchLayers::gathered_bytes_per_layer() const {
  const int64_t q_and_out = shape_.tokens * shape_.heads * kHeadDim * (2 + 2);
  return shape_.tokens * shape_.width * kPackedRowBytes + q_and_out;
}

}  // namespace sparse_decode::bench
