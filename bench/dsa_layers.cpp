#include "bench/dsa_layers.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "bench/accuracy.h"
#include "bench/bench_kernels.h"
#include "bench/cuda_check.h"
#include "reference/dsa_reference.h"

namespace sparse_decode::bench {
namespace {

constexpr size_t kRegionGranule = size_t{1} << 20;  // layer regions are whole MiB (16-byte aligned pages)

}  // namespace

int32_t DsaBenchShape::max_blocks() const {
  const int64_t context_blocks = (kDsaBenchContextKeys + block_size - 1) / block_size;
  return static_cast<int32_t>(std::max<int64_t>(regions, context_blocks));
}

int64_t DsaBenchShape::pages_wanted_per_layer() const {
  const int64_t named = tokens * std::min<int64_t>(int64_t{groups} * regions, max_blocks());
  return std::max<int64_t>(named, max_blocks());
}

DsaTables make_dsa_tables(const DsaBenchShape& s, int64_t pages, uint64_t seed) {
  const int64_t rows = s.rows();
  const int32_t R = s.regions;
  const int32_t max_blocks = s.max_blocks();
  if (pages < max_blocks) throw std::invalid_argument("make_dsa_tables: fewer pages than max_blocks");
  std::mt19937_64 rng(seed);
  std::vector<int32_t> page_order(static_cast<size_t>(pages));
  std::iota(page_order.begin(), page_order.end(), 0);
  std::shuffle(page_order.begin(), page_order.end(), rng);

  DsaTables tables;
  std::vector<int32_t>& block_table = tables.block_table;
  std::vector<int32_t>& regions = tables.regions;
  block_table.resize(static_cast<size_t>(s.tokens * max_blocks));
  regions.resize(static_cast<size_t>(rows * R));
  tables.positions.assign(static_cast<size_t>(rows), static_cast<int32_t>(int64_t{max_blocks} * s.block_size - 1));
  tables.active.assign(static_cast<size_t>(rows), 1);

  std::vector<int32_t> blocks(static_cast<size_t>(max_blocks));  // a permutation: distinct draws a run
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<uint8_t> named(static_cast<size_t>(max_blocks), 0);
  std::vector<int32_t> named_order;
  const int64_t run_tokens = s.mode == BenchMode::kShared ? kBenchQueryLen : 1;  // tokens sharing a table
  int64_t cursor = 0;
  for (int64_t first = 0; first < s.tokens; first += run_tokens) {
    const int64_t n = std::min(run_tokens, s.tokens - first);
    named_order.clear();
    for (int32_t g = 0; g < s.groups; ++g) {
      const int32_t span = static_cast<int32_t>(std::min<int64_t>(R + n - 1, max_blocks));
      for (int32_t c = 0; c < span; ++c) {
        std::uniform_int_distribution<int32_t> pick(c, max_blocks - 1);
        std::swap(blocks[static_cast<size_t>(c)], blocks[static_cast<size_t>(pick(rng))]);
        const int32_t block = blocks[static_cast<size_t>(c)];
        if (!named[static_cast<size_t>(block)]) {
          named[static_cast<size_t>(block)] = 1;
          named_order.push_back(block);
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = (first + i) * s.groups + g;
        const int32_t shift = static_cast<int32_t>(std::min<int64_t>(i, span - R));
        for (int32_t c = 0; c < R; ++c) {
          regions[static_cast<size_t>(row * R + c)] = blocks[static_cast<size_t>(shift + c)];
        }
      }
    }
    int32_t* table = &block_table[static_cast<size_t>(first * max_blocks)];
    int64_t k = 0;
    for (int32_t block : named_order) table[block] = page_order[static_cast<size_t>((cursor + k++) % pages)];
    for (int32_t block = 0; block < max_blocks; ++block) {
      if (!named[static_cast<size_t>(block)]) table[block] = page_order[static_cast<size_t>((cursor + k++) % pages)];
    }
    for (int64_t i = 1; i < n; ++i) {
      std::copy(table, table + max_blocks, &block_table[static_cast<size_t>((first + i) * max_blocks)]);
    }
    cursor = (cursor + static_cast<int64_t>(named_order.size())) % pages;
    for (int32_t block : named_order) named[static_cast<size_t>(block)] = 0;
  }
  // Every region lies below the position (max_blocks * block - 1): all its keys are visible.
  tables.visible_keys = rows * R * s.block_size;
  std::vector<int32_t> read;
  read.reserve(regions.size());
  for (int64_t row = 0; row < rows; ++row) {
    for (int32_t c = 0; c < R; ++c) {
      read.push_back(block_table[static_cast<size_t>(row / s.groups * max_blocks + regions[static_cast<size_t>(row * R + c)])]);
    }
  }
  std::sort(read.begin(), read.end());
  tables.distinct_pages = std::unique(read.begin(), read.end()) - read.begin();
  return tables;
}

DsaCompactCache compact_dsa_cache(const DsaBenchShape& s, const DsaTables& tables, int64_t tokens,
                                  const std::function<void(int64_t, size_t, uint8_t*)>& read) {
  const int64_t rows = tokens * s.groups;
  const int32_t R = s.regions;
  const int32_t max_blocks = s.max_blocks();
  std::map<int32_t, int32_t> compact_of;            // layer page -> compact page
  std::vector<std::pair<int32_t, int32_t>> copies;  // (layer page, group) to copy
  DsaCompactCache compact;
  compact.block_table.assign(static_cast<size_t>(tokens * max_blocks), -1);  // unnamed entries: never read
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t request = row / s.groups;
    const int32_t group = static_cast<int32_t>(row % s.groups);
    for (int32_t c = 0; c < R; ++c) {
      const int32_t block = tables.regions[static_cast<size_t>(row * R + c)];
      const int32_t page = tables.block_table[static_cast<size_t>(request * max_blocks + block)];
      const auto it = compact_of.try_emplace(page, static_cast<int32_t>(compact_of.size())).first;
      compact.block_table[static_cast<size_t>(request * max_blocks + block)] = it->second;
      copies.emplace_back(page, group);
    }
  }
  std::sort(copies.begin(), copies.end());
  copies.erase(std::unique(copies.begin(), copies.end()), copies.end());
  compact.pages = static_cast<int64_t>(compact_of.size());
  compact.cache.assign(static_cast<size_t>(compact.pages * s.page_bytes()), 0);
  for (const auto& [page, group] : copies) {
    const int64_t offset = group * s.group_bytes();
    read(page * s.page_bytes() + offset, static_cast<size_t>(s.group_bytes()),
         compact.cache.data() + compact_of.at(page) * s.page_bytes() + offset);
  }
  return compact;
}

DsaCache::DsaCache(size_t bytes, int layers, DType dtype, uint64_t seed, CUstream_st* stream)
    : layers_(layers),
      dtype_(dtype),
      region_bytes_(bytes / static_cast<size_t>(layers) / kRegionGranule * kRegionGranule),
      data_(region_bytes_ * static_cast<size_t>(layers)) {
  if (region_bytes_ == 0) throw std::runtime_error("dsa bench: cache too small for one MiB a layer");
  if (dtype == DType::kBFloat16) {
    fill_random_bf16(data_.get(), data_.bytes(), seed, stream);
  } else {
    fill_random_e4m3(data_.get(), data_.bytes(), seed, stream);
  }
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

DsaBenchLayers::DsaBenchLayers(const DsaCache& cache, const DsaBenchShape& shape, uint64_t seed, CUstream_st* stream)
    : shape_(shape) {
  if (shape.cache_dtype != cache.dtype()) throw std::invalid_argument("dsa bench: shape and cache dtypes differ");
  pages_per_layer_ = static_cast<int64_t>(cache.region_bytes()) / shape.page_bytes();
  if (pages_per_layer_ < shape.max_blocks()) {
    throw std::runtime_error("dsa bench: a layer's cache region holds " + std::to_string(pages_per_layer_) +
                             " pages of " + std::to_string(shape.page_bytes()) + " bytes, fewer than the " +
                             std::to_string(shape.max_blocks()) + " distinct pages a request needs (raise --cache-mib)");
  }
  const int64_t named = shape.tokens * std::min<int64_t>(int64_t{shape.groups} * shape.regions, shape.max_blocks());
  if (pages_per_layer_ < named) {
    throw std::runtime_error("dsa bench: a layer's cache region holds " + std::to_string(pages_per_layer_) +
                             " pages, fewer than the " + std::to_string(named) +
                             " that the requests name, each its own (raise --cache-mib)");
  }
  layers_.reserve(static_cast<size_t>(cache.layers()));
  for (int i = 0; i < cache.layers(); ++i) layers_.push_back(make_layer(cache, i, seed + 1000003ull * i, stream));
  // The uploads ran synchronously, the fills and output memsets on `stream`.
  SPARSE_DECODE_CUDA_CHECK(cudaDeviceSynchronize());
}

DsaBenchLayer DsaBenchLayers::make_layer(const DsaCache& cache, int index, uint64_t seed, CUstream_st* stream) {
  const DsaBenchShape& s = shape_;
  const int64_t rows = s.rows();
  const int32_t R = s.regions;
  const int32_t max_blocks = s.max_blocks();
  const int64_t pages = pages_per_layer_;
  DsaTables tables = make_dsa_tables(s, pages, seed);

  DsaBenchLayer layer;
  layer.block_table = testing::DeviceBuffer(tables.block_table);
  layer.regions = testing::DeviceBuffer(tables.regions);
  layer.positions = testing::DeviceBuffer(tables.positions);
  layer.active = testing::DeviceBuffer(tables.active);
  layer.scales = testing::DeviceBuffer(std::vector<float>{kDsaBenchKScale, kDsaBenchVScale});
  const int64_t values = rows * s.heads * kDsaHeadDim;
  layer.q = testing::DeviceBuffer(static_cast<size_t>(values * 2));
  fill_random_bf16(layer.q.get(), layer.q.bytes(), seed ^ 0x51u, stream);
  const int64_t gate_width = int64_t{s.groups} * s.heads;
  layer.gate = testing::DeviceBuffer(static_cast<size_t>(s.tokens * gate_width * 2));
  fill_random_bf16(layer.gate.get(), layer.gate.bytes(), seed ^ 0x6Au, stream);
  layer.out = testing::DeviceBuffer(static_cast<size_t>(values * 2));
  layer.out.fill_bytes(0xFF, stream);  // BF16 NaN: an element the kernel never writes fails the check
  int64_t checksum_words = 0;
  for (int loads : kDsaGatherLoadChoices) {
    checksum_words = std::max(checksum_words, dsa_gather_checksum_words(rows, R, s.block_size,
                                                                        static_cast<int32_t>(s.slot_bytes()), loads));
  }
  layer.checksum = testing::DeviceBuffer(static_cast<size_t>(checksum_words * 4));
  if (index == 0) tables0_ = std::move(tables);

  const int64_t element = s.cache_dtype == DType::kFloat8E4M3 ? 1 : 2;
  DsaDecodeArgs& a = layer.args;
  a.memory = MemorySpace::kDevice;
  a.num_rows = rows;
  a.num_groups = s.groups;
  a.num_heads = s.heads;
  a.q = layer.q.get();
  a.q_row_stride = int64_t{s.heads} * kDsaHeadDim;
  a.q_head_stride = kDsaHeadDim;
  a.out = layer.out.get();
  a.out_row_stride = int64_t{s.heads} * kDsaHeadDim;
  a.out_head_stride = kDsaHeadDim;
  a.cache_dtype = s.cache_dtype;
  a.cache = cache.region(index);
  a.num_pages = pages;
  a.block_size = s.block_size;
  a.cache_slot_stride = kDsaSlotDim;
  a.cache_group_stride = int64_t{s.block_size} * kDsaSlotDim;
  a.cache_page_stride = s.groups * a.cache_group_stride;
  a.k_scale = layer.scales.as<float>();
  a.v_scale = layer.scales.as<float>() + 1;
  a.block_table = layer.block_table.as<int32_t>();
  a.num_requests = static_cast<int32_t>(s.tokens);
  a.max_blocks = max_blocks;
  a.block_table_stride = max_blocks;
  a.query_len = kDsaBenchQueryLen;
  a.regions = layer.regions.as<int32_t>();
  a.num_regions = R;
  a.regions_stride = R;
  a.positions = layer.positions.as<int32_t>();
  a.active = layer.active.as<int32_t>();
  a.clear_inactive = true;
  a.scale = static_cast<float>(1.0 / std::sqrt(double{kDsaHeadDim}));
  a.splits = 1;
  a.gate = layer.gate.get();
  a.gate_dtype = DsaGateDType::kBFloat16;
  a.gate_token_stride = gate_width;
  a.enable_pdl = s.enable_pdl;

  DsaGatherLayer& g = layer.gather;
  g.rows = rows;
  g.groups = s.groups;
  g.query_len = kDsaBenchQueryLen;
  g.regions = a.regions;
  g.regions_stride = a.regions_stride;
  g.num_regions = R;
  g.block_table = a.block_table;
  g.block_table_stride = a.block_table_stride;
  g.max_blocks = max_blocks;
  g.positions = a.positions;
  g.active = a.active;
  g.cache = cache.region(index);
  g.num_pages = pages;
  g.block_size = s.block_size;
  g.page_stride_bytes = a.cache_page_stride * element;
  g.group_stride_bytes = a.cache_group_stride * element;
  g.slot_stride_bytes = a.cache_slot_stride * element;
  g.slot_bytes = static_cast<int32_t>(s.slot_bytes());
  g.checksum = layer.checksum.as<uint32_t>();
  return layer;
}

LayerCheck DsaBenchLayers::check_layer0(int32_t splits, DsaKernel kernel, int64_t max_tokens,
                                        CUstream_st* stream) const {
  const DsaBenchShape& s = shape_;
  DsaDecodeArgs args = layers_.at(0).args;
  args.splits = splits;
  args.kernel = kernel;
  const int64_t values_per_row = int64_t{s.heads} * kDsaHeadDim;
  const size_t out_bytes = static_cast<size_t>(s.rows() * values_per_row * 2);
  SPARSE_DECODE_CUDA_CHECK(cudaMemsetAsync(args.out, 0xFF, out_bytes, stream));  // NaN: unwritten elements fail
  const size_t workspace_bytes = workspace_size(args);
  const testing::DeviceBuffer workspace(workspace_bytes);
  if (Status status = dsa_decode(args, workspace.get(), workspace_bytes, stream); !status.ok()) {
    throw std::runtime_error("dsa_decode: " + status.message());
  }
  SPARSE_DECODE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<uint16_t> host_out = download<uint16_t>(args.out, out_bytes / 2);

  LayerCheck check;
  check.tokens_checked = std::min(s.tokens, max_tokens);
  check.whole_output = inspect_bf16(host_out.data(), static_cast<int64_t>(host_out.size()));

  // The sub-problem of the first n tokens (requests): their rows' q and gate,
  // their tables, and the (page, group) slots their regions name, copied
  // into a compact host cache of the same geometry.
  const int64_t n = check.tokens_checked;
  const int64_t rows = n * s.groups;
  const std::vector<uint16_t> q = download<uint16_t>(args.q, static_cast<size_t>(rows * values_per_row));
  const std::vector<uint16_t> gate = download<uint16_t>(args.gate, static_cast<size_t>(n * s.groups * s.heads));
  const std::vector<float> scales = download<float>(args.k_scale, 2);

  const auto* device_cache = static_cast<const uint8_t*>(args.cache);
  const DsaCompactCache compact =
      compact_dsa_cache(s, tables0_, n, [&](int64_t offset, size_t bytes, uint8_t* destination) {
        SPARSE_DECODE_CUDA_CHECK(cudaMemcpy(destination, device_cache + offset, bytes, cudaMemcpyDeviceToHost));
      });

  DsaDecodeArgs host = args;
  host.memory = MemorySpace::kHost;
  host.num_rows = rows;
  host.q = q.data();
  host.out = nullptr;
  host.cache = compact.cache.data();
  host.num_pages = compact.pages;
  host.k_scale = &scales[0];
  host.v_scale = &scales[1];
  host.block_table = compact.block_table.data();
  host.num_requests = static_cast<int32_t>(n);
  host.regions = tables0_.regions.data();
  host.positions = tables0_.positions.data();
  host.active = tables0_.active.data();
  host.gate = gate.data();
  host.enable_pdl = false;
  check.first_tokens = compare_bf16(host_out.data(), reference::dsa_decode(host).out);
  return check;
}

}  // namespace sparse_decode::bench
