#include "bench/dsa_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_run.h"
#include "bench/cuda_check.h"
#include "bench/dsa_gather.h"
#include "bench/dsa_layers.h"
#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::bench {
namespace {

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMinCacheBytes = 2 * kGiB;  // as the other layouts' pools

// The other layouts' CSV columns, then the DSA shape's own.
constexpr const char* kDsaCsvHeader =
    "kernel,path,tokens,width,heads,layers,us_per_layer,gathered_bytes,gbps,gather_us,gather_fraction,"
    "groups,block,regions,splits,rows,gather_loads,check_error,mode\n";

// Every shape of the options: heads outermost, then G, block, R, then T.
void for_each_dsa_shape(const BenchOptions& o, const std::function<void(const DsaBenchShape&)>& run) {
  for (int32_t heads : o.heads) {
    for (int32_t groups : o.dsa_groups) {
      for (int32_t block : o.dsa_block_sizes) {
        for (int32_t regions : o.dsa_regions) {
          for (int64_t tokens : o.tokens) {
            DsaBenchShape shape;
            shape.tokens = tokens;
            shape.groups = groups;
            shape.heads = heads;
            shape.block_size = block;
            shape.regions = regions;
            shape.cache_dtype = o.dtype;
            shape.enable_pdl = o.enable_pdl;
            run(shape);
          }
        }
      }
    }
  }
}

// Bytes of a layer region that holds the pages of the largest shape's
// requests once each (every request's pages its own).
size_t distinct_region_bytes(const BenchOptions& o) {
  size_t wanted = 0;
  for_each_dsa_shape(o, [&](const DsaBenchShape& s) {
    wanted = std::max(wanted, static_cast<size_t>(s.pages_wanted_per_layer() * s.page_bytes()));
  });
  return wanted;
}

// The default cache: regions of distinct_region_bytes and a MiB more, at least 2 GiB in all.
size_t distinct_cache_bytes(const BenchOptions& o) {
  return std::max(kMinCacheBytes, (distinct_region_bytes(o) / kMiB + 1) * kMiB * static_cast<size_t>(o.layers));
}

// --cache-mib, or distinct_cache_bytes; 0 after saying why it does not fit
// the free memory beside the L2 flush buffer and 1 GiB.
size_t cache_bytes_for(const BenchOptions& o) {
  if (o.dsa_cache_bytes) return o.dsa_cache_bytes;
  const size_t wanted = distinct_cache_bytes(o);
  size_t free_bytes = 0, total_bytes = 0;
  SPARSE_DECODE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t reserved = o.flush_bytes + kGiB;
  const size_t limit = free_bytes > reserved ? free_bytes - reserved : 0;
  if (wanted > limit) {
    std::fprintf(stderr,
                 "bench: the shapes need a %.1f GiB cache for every request's pages to be its own (the distinct mode) "
                 "(%d layers), more than the %.1f GiB available; lower --tokens, --groups or --layers\n",
                 wanted / double(kGiB), o.layers, limit / double(kGiB));
    return 0;
  }
  return wanted;
}

}  // namespace

std::string check_dsa_options(const BenchOptions& o) {
  if (o.kernels.size() != 1 || o.kernels[0] != Dsv4Kernel::kAuto) {
    return "--kernel: expected auto with --layout dsa, got " + kernels_name(o);
  }
  if (o.widths != BenchOptions{}.widths) {
    return "--widths: not with --layout dsa (a DSA row reads --regions x --block keys)";
  }
  if (o.gather_rows_per_warp != 0) {
    return "--gather-rows: not with --layout dsa (the DSA gather times 2, 4 and 8 loads a thread and keeps the "
           "fastest)";
  }
  for (int32_t h : o.heads) {
    if (h < 1 || h > kDsaMaxHeads) {
      return "--heads: expected 1..16 query heads a group with --layout dsa, got " + std::to_string(h);
    }
  }
  if (o.dsa_groups.empty() || o.dsa_block_sizes.empty() || o.dsa_regions.empty() || o.dsa_splits.empty()) {
    return "--groups, --block, --regions and --splits need at least one value";
  }
  for (DsaKernel k : o.dsa_kernels) {
    if ((k == DsaKernel::kDirect || k == DsaKernel::kDirectCluster) && o.dtype != DType::kFloat8E4M3) {
      return "--dsa-kernel: direct, cluster, both and direct-both expect --dtype fp8";
    }
  }
  for (int32_t s : o.dsa_splits) {
    if (s < 0 || s > kDsaMaxSplits) {
      return "--splits: expected 1..32, or 0 for dsa_splits_for(rows), got " + std::to_string(s);
    }
  }
  if (std::string problem = check_common_options(o); !problem.empty()) return problem;
  // Layer regions are whole MiB: each must hold the largest shape's pages.
  const size_t needed_mib = (distinct_region_bytes(o) + kMiB - 1) / kMiB * static_cast<size_t>(o.layers);
  if (o.dsa_cache_bytes != 0 && o.dsa_cache_bytes / kMiB < needed_mib) {
    return "--cache-mib: every request's pages its own needs >= " + std::to_string(needed_mib) +
           " MiB for these shapes and " + std::to_string(o.layers) + " layers, got " +
           std::to_string(o.dsa_cache_bytes / kMiB);
  }
  return {};
}

namespace {

const char* dsa_kernel_name(DsaKernel kernel) {
  switch (kernel) {
    case DsaKernel::kStaged: return "staged";
    case DsaKernel::kDirect: return "direct";
    case DsaKernel::kDirectCluster: return "cluster";
    default: return "auto";
  }
}

struct DsaRow {
  DsaBenchShape shape;
  DsaKernel kernel = DsaKernel::kAuto;
  int32_t splits = 0;
  bool auto_splits = false;
  int layers = 0;
  double decode_us = 0.0;
  int64_t gathered_bytes = 0;
  double gather_us = 0.0;
  int gather_loads = 0;
  double check_error = 0.0;

  double gbps() const { return decode_us > 0 ? gathered_bytes / decode_us / 1e3 : 0.0; }
  double gather_fraction() const { return decode_us > 0 ? gather_us / decode_us : 0.0; }
  std::string path(bool pdl) const {
    const std::string prefix = kernel == DsaKernel::kAuto ? "" : std::string(dsa_kernel_name(kernel)) + ":";
    return prefix + (auto_splits ? "auto:splits=" : "splits=") + std::to_string(splits) + (pdl ? "+pdl" : "");
  }
};

void print_header(const BenchOptions& o, const DsaCache& cache, const GraphTimer& timer, BenchMode mode) {
  const bool fp8 = o.dtype == DType::kFloat8E4M3;
  std::printf("dsa_decode (SPEC section 4): %s cache (slots of 384 %s: K then V)%s; BF16 q, out and gate (sigmoid)\n",
              fp8 ? "FP8 E4M3" : "BF16", fp8 ? "bytes" : "BF16", fp8 ? ", k_scale 0.5, v_scale 0.25" : "");
  if (mode == BenchMode::kDistinct) {
    std::printf("mode distinct: a request a token (query_len 1), context %lld keys, positions at its end (every "
                "region fully visible); R distinct random regions a row; a request's blocks on random pages of its "
                "own (no page named by two requests in a layer); active everywhere\n",
                static_cast<long long>(kDsaBenchContextKeys));
  } else {
    std::printf("mode shared: a request a token (query_len 1), context %lld keys, positions at its end; runs of %d "
                "tokens share one block table (MTP decoding) and slide over R + %d random regions of it, token i "
                "reading regions i .. i + R - 1 (pages repeat within a run, part of them from L2); active "
                "everywhere\n",
                static_cast<long long>(kDsaBenchContextKeys), kBenchQueryLen, kBenchQueryLen - 1);
  }
  std::printf("%d layers a graph, each its own q, gate, tables and cache region; cache %.2f GiB (%zu MiB a layer); "
              "L2 flushed with %zu MiB\n",
              o.layers, cache.total_bytes() / double(kGiB), cache.region_bytes() / kMiB, timer.flush_bytes() / kMiB);
  std::printf("median of %d replays (per layer = replay / L)%s\n", o.replays, o.enable_pdl ? ", PDL on" : "");
  std::printf("reference gather: each (row, region) resolves its page (region id, then block table) and reads the "
              "visible slots' K and V with 16-byte loads; the fastest of 2, 4, 8 loads a thread (column loads/t)\n\n");
  std::printf("%6s %3s %5s %5s %4s %6s %9s %11s %12s %9s %11s %7s %10s %10s %7s\n", "T", "G", "heads", "block", "R",
              "rows", "splits", "decode_us", "gathered_MB", "GB/s", "gather_us", "loads/t", "fraction", "check_err",
              "kernel");
}

void print_row(const DsaRow& r) {
  const std::string splits = (r.auto_splits ? "auto:" : "") + std::to_string(r.splits);
  std::printf("%6lld %3d %5d %5d %4d %6lld %9s %11.2f %12.3f %9.1f %11.2f %7d %10.3f %10.2e %7s\n",
              static_cast<long long>(r.shape.tokens), r.shape.groups, r.shape.heads, r.shape.block_size,
              r.shape.regions, static_cast<long long>(r.shape.rows()), splits.c_str(), r.decode_us,
              r.gathered_bytes / 1e6, r.gbps(), r.gather_us, r.gather_loads, r.gather_fraction(), r.check_error,
              dsa_kernel_name(r.kernel));
  std::fflush(stdout);
}

void write_csv_row(std::ofstream& csv, const DsaRow& r, bool pdl) {
  const DsaBenchShape& s = r.shape;
  csv << (s.cache_dtype == DType::kBFloat16 ? "dsa_decode_bf16," : "dsa_decode,") << r.path(pdl) << ',' << s.tokens
      << ',' << int64_t{s.regions} * s.block_size << ',' << s.heads << ',' << r.layers << ',' << r.decode_us << ','
      << r.gathered_bytes << ',' << r.gbps() << ',' << r.gather_us << ',' << r.gather_fraction() << ',' << s.groups
      << ',' << s.block_size << ',' << s.regions << ',' << r.splits << ',' << s.rows() << ',' << r.gather_loads << ','
      << r.check_error << ',' << mode_name(s.mode) << '\n';
  csv.flush();
}

// Everything that outlives one shape.
struct DsaContext {
  const BenchOptions& options;
  CUstream_st* stream;
  const DsaCache& cache;
  GraphTimer& timer;
};

enum class ShapeOutcome { kTimed, kSkipped, kCheckFailed };

// Times the reference gather once, then checks layer 0 and times the decode
// with every --splits value and every --dsa-kernel (rows: one a pair).
ShapeOutcome run_shape(DsaContext& ctx, const DsaBenchShape& shape, std::vector<DsaRow>& rows) {
  const BenchOptions& o = ctx.options;
  const uint64_t seed = o.seed + 7919ull * shape.tokens + 104729ull * shape.groups + 31ull * shape.regions +
                        shape.block_size;
  const DsaBenchLayers layers(ctx.cache, shape, seed, ctx.stream);
  auto label = [&] {
    char text[128];
    std::snprintf(text, sizeof(text), "T=%lld G=%d heads=%d block=%d R=%d mode %s",
                  static_cast<long long>(shape.tokens), shape.groups, shape.heads, shape.block_size, shape.regions,
                  mode_name(shape.mode));
    return std::string(text);
  };

  // Splits of each timing, and the workspace that the largest asks for.
  std::vector<DsaRow> planned;
  size_t workspace_bytes = 0;
  for (int32_t splits : o.dsa_splits) {
    for (DsaKernel kernel : o.dsa_kernels) {
      DsaRow row;
      row.shape = shape;
      row.kernel = kernel;
      row.auto_splits = splits == 0;
      row.splits = splits == 0 ? dsa_splits_for(shape.rows()) : splits;
      DsaDecodeArgs args = layers.layer(0).args;
      args.splits = row.splits;
      args.kernel = kernel;
      if (Status status = supports(args); !status.ok()) {
        std::printf("skip %s splits=%d: %s\n", label().c_str(), row.splits, status.message().c_str());
        return ShapeOutcome::kSkipped;
      }
      workspace_bytes = std::max(workspace_bytes, workspace_size(args));
      planned.push_back(row);
    }
  }
  const testing::DeviceBuffer workspace(workspace_bytes);

  double gather_us = 0.0;  // the fastest variant's
  int gather_loads = 0;
  for (int loads : kDsaGatherLoadChoices) {
    const double us = time_per_layer(ctx.timer, o, layers.count(), [&](int i, CUstream_st* stream) {
      launch_dsa_gather(layers.layer(i).gather, loads, stream);
    });
    if (gather_us == 0.0 || us < gather_us) {
      gather_us = us;
      gather_loads = loads;
    }
  }

  for (DsaRow& row : planned) {
    const LayerCheck check = layers.check_layer0(row.splits, row.kernel, o.check_tokens, ctx.stream);
    if (!check.passes()) {
      std::printf("FAIL %s splits=%d kernel %s, not timed: %s\n", label().c_str(), row.splits,
                  dsa_kernel_name(row.kernel), check.summary().c_str());
      return ShapeOutcome::kCheckFailed;
    }
    row.layers = layers.count();
    row.gathered_bytes = layers.gathered_bytes_per_layer();
    row.gather_us = gather_us;
    row.gather_loads = gather_loads;
    row.check_error = check.first_tokens.relative_l2;
    row.decode_us = time_per_layer(ctx.timer, o, layers.count(), [&](int i, CUstream_st* stream) {
      DsaDecodeArgs args = layers.layer(i).args;
      args.splits = row.splits;
      args.kernel = row.kernel;
      if (Status status = dsa_decode(args, workspace.get(), workspace_bytes, stream); !status.ok()) {
        throw std::runtime_error("dsa_decode: " + status.message());
      }
    });
    rows.push_back(row);
  }
  return ShapeOutcome::kTimed;
}

}  // namespace

int run_dsa_bench(const BenchOptions& options) {
  std::ofstream csv;
  if (const int status = start_run(options, check_dsa_options(options), csv); status != 0) return status;
  if (options.dsa_cache_bytes != 0 && options.dsa_cache_bytes < kGiB) {
    std::fprintf(stderr, "bench: note: DESIGN.md asks for a cache of >= 1 GiB, got %zu MiB\n",
                 options.dsa_cache_bytes / kMiB);
  }
  if (csv.is_open()) {  // start_run wrote the other layouts' header: this layout has more columns
    csv.close();
    csv.open(options.csv_path, std::ios::trunc);
    csv << kDsaCsvHeader;
  }
  const size_t cache_bytes = cache_bytes_for(options);
  if (cache_bytes == 0) return 2;
  const Stream stream = make_stream();
  const DsaCache cache(cache_bytes, options.layers, options.dtype, options.seed, stream.get());
  GraphTimer timer(stream.get(), options.flush_bytes);
  DsaContext ctx{options, stream.get(), cache, timer};
  int failed = 0;
  for (BenchMode mode : options.modes) {
    print_header(options, cache, timer, mode);
    for_each_dsa_shape(options, [&](DsaBenchShape shape) {
      shape.mode = mode;
      std::vector<DsaRow> rows;
      const ShapeOutcome outcome = run_shape(ctx, shape, rows);
      failed += outcome == ShapeOutcome::kCheckFailed;
      for (const DsaRow& row : rows) {
        print_row(row);
        if (csv.is_open()) write_csv_row(csv, row, options.enable_pdl);
      }
    });
  }
  std::printf("\nrows = T x G; gathered = K + V bytes of the visible keys (rows x R x block x %d); "
              "GB/s = gathered / decode time; fraction = gather_us / decode_us (1.0: as fast as the pure gather); "
              "check_err: relative L2 of layer 0's first %lld tokens against the fp64 CPU backend\n",
              options.dtype == DType::kFloat8E4M3 ? 384 : 768, static_cast<long long>(options.check_tokens));
  return finish_run(options, csv.is_open(), failed);
}

}  // namespace sparse_decode::bench
