// The data of `sparse-decode bench --layout dsa`: one large region-paged
// cache on the device (random E4M3 or BF16 values, SPEC section 4's
// [pages, G, block, 384] slots), split into one region per layer, and L
// layers that each have their own q, gate, block table, regions, positions,
// active flags, scales and output, so that a graph of L dsa_decode calls
// reads its keys from DRAM as a real model does. Everything large is filled
// on the device; the int32 tables are drawn on the host and copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench/bench_indices.h"
#include "bench/dsa_gather.h"
#include "bench/layer_check.h"
#include "sparse_decode/dsa_decode.h"
#include "testing/device_buffer.h"

struct CUstream_st;

namespace sparse_decode::bench {

// A request's context: its block table maps max(R, 16384 / block) logical
// blocks, and every row's position is the context's last key, so each of a
// row's R regions is visible in full (R * block keys a row).
inline constexpr int64_t kDsaBenchContextKeys = 16384;
inline constexpr int32_t kDsaBenchQueryLen = 1;  // one token a request: requests = tokens
inline constexpr float kDsaBenchKScale = 0.5f;   // FP8 k = e4m3 * k_scale (random E4M3 magnitudes 1/8..3.75)
inline constexpr float kDsaBenchVScale = 0.25f;

// What every layer of a shape shares.
struct DsaBenchShape {
  int64_t tokens = 1;
  int32_t groups = 1;       // G
  int32_t heads = 16;       // per group
  int32_t block_size = 64;  // keys a region and a page
  int32_t regions = 16;     // R
  DType cache_dtype = DType::kFloat8E4M3;
  bool enable_pdl = false;
  BenchMode mode = BenchMode::kDistinct;  // make_dsa_tables

  int64_t rows() const { return tokens * groups; }
  int32_t max_blocks() const;
  int64_t slot_bytes() const { return int64_t{kDsaSlotDim} * (cache_dtype == DType::kFloat8E4M3 ? 1 : 2); }
  int64_t group_bytes() const { return block_size * slot_bytes(); }
  int64_t page_bytes() const { return groups * group_bytes(); }
  // Pages a layer's block tables name through some region at the most
  // (tokens * min(G * R, max_blocks)), and the pages one request's table
  // needs distinct: what a layer's cache region should hold.
  int64_t pages_wanted_per_layer() const;
};

// One layer's int32 tables, drawn on the host: block_table [tokens,
// max_blocks] (request t = token t), regions [rows, R], positions and active
// [rows]. A row's R blocks are distinct; every position is the context's
// last key. In the distinct mode each request takes its named pages from a
// shuffled order of the layer's `pages` one after another (distinct across
// requests while `pages` >= pages_wanted_per_layer, which the bench sizes its
// cache for) and the rest of its table, never read, from the pages that
// follow (a request's pages are distinct). In the shared mode runs of
// kBenchQueryLen tokens share one table, as the tokens of a request under
// MTP decoding do, and their regions slide: a run's group draws R + n - 1
// distinct blocks (n tokens, at most max_blocks) and token i of the run
// reads blocks i .. i + R - 1 of them, as the shared mode's SWA windows
// start a row later a token.
struct DsaTables {
  std::vector<int32_t> block_table, regions, positions, active;
  int64_t visible_keys = 0;    // keys the rows attend: rows * R * block
  int64_t distinct_pages = 0;  // pages the regions name
};
DsaTables make_dsa_tables(const DsaBenchShape& shape, int64_t pages, uint64_t seed);

// The cache slots that the first `tokens` tokens' rows read, copied into a
// compact cache of the same geometry (page, group and slot strides), with
// their block table [tokens, max_blocks] remapped to it (-1 where no region
// of theirs names the block). `read(offset, bytes, destination)` copies
// bytes of the layer's cache region.
struct DsaCompactCache {
  std::vector<uint8_t> cache;
  std::vector<int32_t> block_table;
  int64_t pages = 0;
};
DsaCompactCache compact_dsa_cache(const DsaBenchShape& shape, const DsaTables& tables, int64_t tokens,
                                  const std::function<void(int64_t, size_t, uint8_t*)>& read);

// The cache: `bytes` of random non-zero E4M3 (or BF16 of E4M3 values) split
// into `layers` regions of whole MiB; a shape cuts a region into its pages.
class DsaCache {
 public:
  DsaCache(size_t bytes, int layers, DType dtype, uint64_t seed, CUstream_st* stream);

  const uint8_t* region(int layer) const { return data_.as<uint8_t>() + layer * region_bytes_; }
  size_t region_bytes() const { return region_bytes_; }
  size_t total_bytes() const { return data_.bytes(); }
  int layers() const { return layers_; }
  DType dtype() const { return dtype_; }

 private:
  int layers_;
  DType dtype_;
  size_t region_bytes_;
  testing::DeviceBuffer data_;
};

// One layer: its inputs on the device, its dsa_decode arguments (splits 1:
// the bench sets them a timing) and the same reads as a DsaGatherLayer.
struct DsaBenchLayer {
  testing::DeviceBuffer q, gate, block_table, regions, positions, active, scales, out, checksum;
  DsaDecodeArgs args;
  DsaGatherLayer gather;
};

class DsaBenchLayers {
 public:
  DsaBenchLayers(const DsaCache& cache, const DsaBenchShape& shape, uint64_t seed, CUstream_st* stream);

  const DsaBenchShape& shape() const { return shape_; }
  int count() const { return static_cast<int>(layers_.size()); }
  const DsaBenchLayer& layer(int i) const { return layers_[i]; }

  // K + V bytes of the visible keys a layer's rows read (384 a key FP8, 768
  // BF16); q, gate and out are not counted.
  int64_t gathered_bytes_per_layer() const { return tables0_.visible_keys * shape_.slot_bytes(); }
  int64_t pages_per_layer() const { return pages_per_layer_; }

  // Runs layer 0 once with `splits` on `stream`, checks its whole output
  // (finite, not all zero) and compares the first min(tokens, max_tokens)
  // tokens' rows with the fp64 CPU backend (reference::dsa_decode), computed
  // on host copies of their q, gate, tables and the cache slots they name.
  LayerCheck check_layer0(int32_t splits, DsaKernel kernel, int64_t max_tokens, CUstream_st* stream) const;

 private:
  DsaBenchLayer make_layer(const DsaCache& cache, int index, uint64_t seed, CUstream_st* stream);

  DsaBenchShape shape_;
  int64_t pages_per_layer_ = 0;
  std::vector<DsaBenchLayer> layers_;
  DsaTables tables0_;  // layer 0's, for the check (every layer's have the same counts)
};

}  // namespace sparse_decode::bench
