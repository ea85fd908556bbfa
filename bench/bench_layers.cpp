#include "bench/bench_layers.h"

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "bench/cuda_check.h"

namespace sparse_decode::bench {
namespace {

int64_t element_bytes(DType dtype) { return dtype == DType::kBFloat16 ? 2 : 1; }

void fill_random(DType dtype, void* data, size_t bytes, uint64_t seed, CUstream_st* stream) {
  if (dtype == DType::kBFloat16) {
    fill_random_bf16(data, bytes, seed, stream);
  } else {
    fill_random_e4m3(data, bytes, seed, stream);
  }
}

int64_t region_rows_for(size_t pool_bytes, int64_t row_bytes, int layers) {
  return static_cast<int64_t>(pool_bytes / row_bytes / layers) / kBenchPageSize * kBenchPageSize;
}

}  // namespace

std::vector<float> random_sinks(int32_t heads, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> sinks(static_cast<size_t>(heads));
  for (float& sink : sinks) sink = normal(rng);
  return sinks;
}

KvPools::KvPools(size_t swa_bytes, size_t compressed_bytes, int layers, DType dtype, uint64_t seed,
                 CUstream_st* stream)
    : layers_(layers),
      dtype_(dtype),
      row_bytes_(kHeadDim * element_bytes(dtype)),
      swa_region_rows_(region_rows_for(swa_bytes, row_bytes_, layers)),
      compressed_region_rows_(region_rows_for(compressed_bytes, row_bytes_, layers)),
      swa_(static_cast<size_t>(swa_region_rows_ * layers * row_bytes_)),
      compressed_(static_cast<size_t>(compressed_region_rows_ * layers * row_bytes_)) {
  fill_random(dtype, swa_.get(), swa_.bytes(), seed, stream);
  fill_random(dtype, compressed_.get(), compressed_.bytes(), seed + 1, stream);
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

KvPool KvPools::region(const testing::DeviceBuffer& pool, int64_t region_rows, int layer) const {
  KvPool region;
  region.data = pool.as<uint8_t>() + layer * region_rows * row_bytes_;
  region.page_size = kBenchPageSize;
  region.pages = region_rows / kBenchPageSize;
  region.row_stride = kHeadDim;
  region.page_stride = kBenchPageSize * kHeadDim;  // contiguous pages: row r at r * 512 elements
  return region;
}

BenchLayers::BenchLayers(const KvPools& pools, const BenchShape& shape, uint64_t seed, CUstream_st* stream)
    : shape_(shape) {
  shape_.dtype = pools.dtype();
  layers_.reserve(static_cast<size_t>(pools.layers()));
  for (int i = 0; i < pools.layers(); ++i) layers_.push_back(make_layer(pools, i, seed + 1000003ull * i, stream));
  // The uploads ran synchronously, the fills and output memsets on `stream`
  // (synchronous memsets on the legacy stream leave every later launch of
  // the process ~0.3 us slower; docs/kernels/split.md).
  SPARSE_DECODE_CUDA_CHECK(cudaDeviceSynchronize());
}

BenchLayer BenchLayers::make_layer(const KvPools& pools, int index, uint64_t seed, CUstream_st* stream) {
  const BenchShape& s = shape_;
  const bool has_compressed = s.width > kSwaColumns;
  const KvPool swa = pools.swa_region(index);
  const KvPool compressed = has_compressed ? pools.compressed_region(index) : KvPool{};
  const std::vector<int32_t> host_indices = make_layer_indices(s, swa.rows(), pools.compressed_region_rows(), seed);

  BenchLayer layer;
  layer.indices = testing::DeviceBuffer(host_indices);
  const DType dtype = pools.dtype();
  layer.q = testing::DeviceBuffer(static_cast<size_t>(s.tokens * s.heads * kHeadDim * element_bytes(dtype)));
  fill_random(dtype, layer.q.get(), layer.q.bytes(), seed ^ 0x51u, stream);
  layer.sinks = testing::DeviceBuffer(random_sinks(s.heads, seed ^ 0x5Eu));
  layer.out = testing::DeviceBuffer(static_cast<size_t>(s.tokens * s.heads * kHeadDim * 2));
  layer.out.fill_bytes(0xFF, stream);  // BF16 NaN: an element the kernel never writes fails the check
  layer.checksum = testing::DeviceBuffer(static_cast<size_t>(gather_checksum_words(s.tokens, s.width, 1) * 4));
  layer.active_rows = s.tokens * s.width;  // make_layer_indices names an in-range row in every column

  Dsv4DecodeArgs& a = layer.args;
  a.memory = MemorySpace::kDevice;
  a.dtype = dtype;
  a.num_tokens = s.tokens;
  a.num_heads = s.heads;
  a.q = layer.q.get();
  a.q_token_stride = int64_t{s.heads} * kHeadDim;
  a.q_head_stride = kHeadDim;
  a.swa_kv = swa;
  a.compressed_kv = compressed;
  a.indices = layer.indices.as<int32_t>();
  a.width = s.width;
  a.indices_stride = s.width;
  a.sinks = layer.sinks.as<float>();
  a.bmm1_scale.value = static_cast<float>(1.0 / std::sqrt(double{kHeadDim}));
  a.bmm2_scale.value = 1.0f;
  a.out = layer.out.get();
  a.out_token_stride = int64_t{s.heads} * kHeadDim;
  a.out_head_stride = kHeadDim;
  a.enable_pdl = s.enable_pdl;

  GatherLayer& g = layer.gather;
  g.indices = a.indices;
  g.tokens = s.tokens;
  g.width = s.width;
  g.indices_stride = s.width;
  g.swa = static_cast<const uint8_t*>(swa.data);
  g.swa_rows = swa.rows();
  g.compressed = static_cast<const uint8_t*>(compressed.data);
  g.compressed_rows = compressed.rows();
  g.row_bytes = pools.row_bytes();
  g.read_bytes = pools.row_bytes();
  g.checksum = layer.checksum.as<uint32_t>();
  return layer;
}

int64_t BenchLayers::active_rows_per_layer() const {
  int64_t rows = 0;
  for (const BenchLayer& layer : layers_) rows += layer.active_rows;
  return layers_.empty() ? 0 : rows / count();
}

int64_t BenchLayers::gathered_bytes_per_layer() const {
  const int64_t q_and_out = shape_.tokens * shape_.heads * kHeadDim * (element_bytes(shape_.dtype) + 2);
  return active_rows_per_layer() * kHeadDim * element_bytes(shape_.dtype) + q_and_out;
}

}  // namespace sparse_decode::bench
