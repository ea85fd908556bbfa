#include "bench/bench_run.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>

#include "bench/accuracy.h"
#include "bench/cuda_check.h"

namespace sparse_decode::bench {

void StreamDeleter::operator()(CUstream_st* stream) const { cudaStreamDestroy(stream); }

Stream make_stream() {
  cudaStream_t stream = nullptr;
  SPARSE_DECODE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream);
}

std::string check_common_options(const BenchOptions& o) {
  if (o.layers < 1) return "--layers must be >= 1";
  if (o.replays < 1) return "--replays must be >= 1";
  if (o.gather_rows_per_warp != 0 && !valid_gather_rows_per_warp(o.gather_rows_per_warp)) {
    return "--gather-rows: expected 0, 1, 2, 4 or 8, got " + std::to_string(o.gather_rows_per_warp);
  }
  if (o.tokens.empty() || o.widths.empty() || o.heads.empty()) return "--tokens, --widths and --heads need at least one value";
  if (o.modes.empty()) return "--mode needs a value";
  if (o.layout != BenchLayout::kDsa) {
    for (int32_t h : o.heads) {
      if (h != 8 && h != 16 && h != 32 && h != 64 && h != 128) {
        return "--heads: expected 8, 16, 32, 64 or 128, got " + std::to_string(h);
      }
    }
  }
  const BenchOptions defaults;
  if (o.layout != BenchLayout::kDsa &&
      (o.dsa_groups != defaults.dsa_groups || o.dsa_block_sizes != defaults.dsa_block_sizes ||
       o.dsa_regions != defaults.dsa_regions || o.dsa_splits != defaults.dsa_splits || o.dsa_cache_bytes != 0 ||
       o.dsa_kernels != defaults.dsa_kernels)) {
    return "--groups, --block, --regions, --splits, --dsa-kernel and --cache-mib: only with --layout dsa";
  }
  for (int64_t t : o.tokens) {
    if (t < 1) return "--tokens: every value must be >= 1";
  }
  return {};
}

void for_each_shape(const BenchOptions& options, BenchMode mode, const std::function<void(const BenchShape&)>& run) {
  for (int32_t heads : options.heads) {
    for (int32_t width : options.widths) {
      for (int64_t tokens : options.tokens) {
        BenchShape shape;
        shape.tokens = tokens;
        shape.width = width;
        shape.heads = heads;
        shape.enable_pdl = options.enable_pdl;
        shape.dtype = options.dtype;
        shape.mode = mode;
        run(shape);
      }
    }
  }
}

PoolBytes default_pool_bytes(const BenchOptions& options) {
  return PoolBytes{options.swa_pool_bytes, options.compressed_pool_bytes};
}

int check_distinct_memory(const BenchOptions& o, int64_t row_bytes, int64_t q_bytes_per_value) {
  if (std::find(o.modes.begin(), o.modes.end(), BenchMode::kDistinct) == o.modes.end()) return 0;
  size_t free_bytes = 0, total_bytes = 0;
  SPARSE_DECODE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t reserved = o.flush_bytes + (size_t{1} << 30);
  const size_t available = free_bytes > reserved ? free_bytes - reserved : 0;
  const std::string problem = distinct_fit_problem(o.tokens, o.widths, o.heads, o.layers, row_bytes, q_bytes_per_value,
                                                   default_pool_bytes(o), available);
  if (problem.empty()) return 0;
  std::fprintf(stderr, "bench: %s\n", problem.c_str());
  return 2;
}

void print_mode_note(BenchMode mode, bool one_request_a_token) {
  if (mode == BenchMode::kDistinct) {
    std::printf("\nmode distinct: one request a token, its own window of 128 SWA rows, every top-k row drawn without "
                "replacement across the layer (no row read twice in a layer)\n");
  } else if (one_request_a_token) {
    std::printf("\nmode shared: windows of requests of %d tokens (token i starts i rows later), each token one "
                "request to the decode; top-k distinct within a token, free to repeat across tokens\n",
                kBenchQueryLen);
  } else {
    std::printf("\nmode shared: requests of %d tokens whose windows overlap (token i starts i rows later); top-k "
                "distinct within a token, free to repeat across tokens\n",
                kBenchQueryLen);
  }
}

std::string kernels_name(const BenchOptions& options) {
  return options.kernels.size() == 1 ? kernel_name(options.kernels[0]) : "all";
}

int finish_run(const BenchOptions& options, bool csv_written, int failed) {
  if (csv_written) std::printf("wrote %s\n", options.csv_path.c_str());
  if (failed) std::printf("%d shape(s) failed the accuracy check and were not timed\n", failed);
  return failed ? 1 : 0;
}

namespace {

void print_device() {
  int device = 0;
  SPARSE_DECODE_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  SPARSE_DECODE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("device %d: %s, sm_%d%d, %d SMs, L2 %.0f MB, %.1f GiB\n", device, prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.totalGlobalMem / double(1 << 30));
}

}  // namespace

int start_run(const BenchOptions& options, const std::string& problem, std::ofstream& csv) {
  if (!problem.empty()) {
    std::fprintf(stderr, "bench: %s\n", problem.c_str());
    return 2;
  }
  std::string why;
  if (!testing::cuda_device_available(&why)) {
    std::fprintf(stderr,
                 "bench: needs a CUDA device (Hopper, sm_90a) and found none: %s.\n"
                 "Times are only meaningful on the GPU; run `sparse-decode demo` for the CPU backend.\n",
                 why.c_str());
    return 2;
  }
  if (!options.csv_path.empty()) {
    csv.open(options.csv_path);
    if (!csv) {
      std::fprintf(stderr, "bench: cannot write %s\n", options.csv_path.c_str());
      return 2;
    }
    csv << kCsvHeader;
  }
  print_device();
  return 0;
}

void print_gather_note(const BenchOptions& o) {
  if (o.gather_rows_per_warp) {
    std::printf("reference gather: %d row(s) in flight a warp, index then row, 16-byte loads\n\n", o.gather_rows_per_warp);
  } else {
    std::printf("reference gather: the fastest of 1, 2, 4, 8 rows in flight a warp (column rows/w), index then row\n\n");
  }
}

double time_per_layer(GraphTimer& timer, const BenchOptions& options, int layers,
                      const std::function<void(int, CUstream_st*)>& launch_layer) {
  const auto replays = timer.time_replays(
      [&](cudaStream_t stream) {
        for (int i = 0; i < layers; ++i) launch_layer(i, stream);
      },
      options.replays, options.warmup);
  return median(replays) / layers;
}

std::vector<double> time_per_layer_interleaved(
    GraphTimer& timer, const BenchOptions& options, int layers,
    const std::vector<std::function<void(int, CUstream_st*)>>& launch_layers) {
  std::vector<std::function<void(CUstream_st*)>> enqueues;
  for (const auto& launch_layer : launch_layers) {
    enqueues.push_back([&launch_layer, layers](cudaStream_t stream) {
      for (int i = 0; i < layers; ++i) launch_layer(i, stream);
    });
  }
  std::vector<double> per_layer;
  for (const std::vector<double>& replays : timer.time_interleaved(enqueues, options.replays, options.warmup)) {
    per_layer.push_back(median(replays) / layers);
  }
  return per_layer;
}

GatherTime time_reference_gather(GraphTimer& timer, const BenchOptions& options, int layers,
                                 const std::function<const GatherLayer&(int)>& gather) {
  GatherTime best;
  for (int rows_per_warp : kGatherRowsPerWarpChoices) {
    if (options.gather_rows_per_warp && rows_per_warp != options.gather_rows_per_warp) continue;
    const double us = time_per_layer(timer, options, layers, [&](int i, cudaStream_t stream) {
      launch_gather_rows(gather(i), rows_per_warp, stream);
    });
    if (best.us == 0.0 || us < best.us) best = GatherTime{us, rows_per_warp};
  }
  return best;
}

}  // namespace sparse_decode::bench
