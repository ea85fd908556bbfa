#include "bench/dsv4_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "bench/accuracy.h"
#include "bench/bench_layers.h"
#include "bench/bench_run.h"

#include "bench/cuda_check.h"
#include "bench/graph_timer.h"
#include "bench/layer_check.h"
#include "common/instrument.h"
#include "sparse_decode/dsv4_decode.h"
#include "sparse_decode/introspection.h"

namespace sparse_decode::bench {

constexpr int32_t kMaxWidth = kSwaColumns + 16384;  // the widest call of dsv4_decode

std::string check_dsv4_options(const BenchOptions& o) {
  if (o.kernels.empty()) return "--kernel needs a value";
  if (o.kernels.size() == 1 && (o.kernels[0] == kPackedStreamH64 || o.kernels[0] == kPackedSplitH64)) {
    return std::string("--kernel: ") + kernel_name(o.kernels[0]) + " runs with --layout packed only";
  }
  for (int32_t w : o.widths) {
    if (w < kSwaColumns || w % 4 != 0 || w > kMaxWidth) {
      return "--widths: expected multiples of 4 in [128, 16512], got " + std::to_string(w);
    }
  }
  return check_common_options(o);
}

namespace {

// Everything that outlives one shape.
struct BenchContext {
  const BenchOptions& options;
  cudaStream_t stream;
  const KvPools& pools;
  GraphTimer& timer;
};

void print_header(const BenchOptions& o, const KvPools& pools, const GraphTimer& timer, BenchMode mode) {
  print_mode_note(mode, false);
  std::printf("%d layers a graph, each its own indices and pool region; pools %.2f GiB %s; L2 flushed with %zu MiB\n",
              o.layers, pools.total_bytes() / double(1 << 30), pools.dtype() == DType::kBFloat16 ? "BF16" : "FP8",
              timer.flush_bytes() / kMiB);
  std::printf("sinks on, every column active; median of %d replays (per layer = replay / L)%s\n", o.replays,
              o.enable_pdl ? ", PDL on" : "");
  print_gather_note(o);
  std::printf("%6s %6s %5s %-8s %-15s %11s %12s %9s %11s %7s %10s %10s\n", "T", "width", "heads", "mode", "kernel",
              "decode_us", "gathered_MB", "GB/s", "gather_us", "rows/w", "fraction", "check_err");
}

// "cluster", "stream", "split", or "auto:<the one it ran>".
std::string path_name(const BenchRow& r) {
  if (r.kernel != Dsv4Kernel::kAuto) return kernel_name(r.kernel);
  return std::string("auto:") + kernel_name(r.ran);
}

void print_row(const BenchRow& r) {
  std::printf("%6lld %6d %5d %-8s %-15s %11.2f %12.3f %9.1f %11.2f %7d %10.3f %10.2e\n",
              static_cast<long long>(r.tokens), r.width, r.heads, mode_name(r.mode), path_name(r).c_str(), r.decode_us,
              r.gathered_bytes / 1e6, r.gbps(), r.gather_us, r.gather_rows_per_warp, r.gather_fraction(), r.check_error);
  std::fflush(stdout);
}

void write_csv_row(std::ofstream& csv, const BenchRow& r) {
  csv << (r.dtype == DType::kBFloat16 ? "dsv4_decode_bf16," : "dsv4_decode,") << path_name(r) << ',' << r.tokens
      << ',' << r.width << ',' << r.heads << ',' << r.layers << ',' << r.decode_us << ',' << r.gathered_bytes << ','
      << r.gbps() << ',' << r.gather_us << ',' << r.gather_fraction() << ',' << mode_name(r.mode) << '\n';
  csv.flush();
}

// Per-layer median time of the L launches that `launch_layer(i, stream)` makes.
template <typename LaunchLayer>
double time_per_layer(BenchContext& ctx, int layers, LaunchLayer launch_layer) {
  return bench::time_per_layer(ctx.timer, ctx.options, layers, launch_layer);
}

// The fastest per-layer time of the reference gather over the allowed variants.
void time_reference_gather(BenchContext& ctx, const BenchLayers& layers, BenchRow& row) {
  const GatherTime gather = bench::time_reference_gather(ctx.timer, ctx.options, layers.count(),
                                                         [&](int i) -> const GatherLayer& { return layers.layer(i).gather; });
  row.gather_us = gather.us;
  row.gather_rows_per_warp = gather.rows_per_warp;
}

enum class ShapeOutcome { kTimed, kSkipped, kCheckFailed };

// Times every kernel of the options on one shape (rows: one a kernel), and
// the reference gather once.
ShapeOutcome run_shape(BenchContext& ctx, const BenchShape& shape, std::vector<BenchRow>& rows) {
  const char* skip = "skip T=%lld width=%d heads=%d: %s\n";
  if (shape.width < kSwaColumns) {
    std::printf(skip, static_cast<long long>(shape.tokens), shape.width, shape.heads, "width must be >= 128");
    return ShapeOutcome::kSkipped;
  }
  const BenchLayers layers(ctx.pools, shape, ctx.options.seed + 7919ull * shape.tokens + shape.width, ctx.stream);
  if (Status status = supports(layers.layer(0).args); !status.ok()) {
    std::printf(skip, static_cast<long long>(shape.tokens), shape.width, shape.heads, status.message().c_str());
    return ShapeOutcome::kSkipped;
  }
  size_t workspace_bytes = 0;  // the most that any layer asks for with any kernel timed
  for (Dsv4Kernel kernel : ctx.options.kernels) {
    for (int i = 0; i < layers.count(); ++i) {
      Dsv4DecodeArgs args = layers.layer(i).args;
      args.kernel = kernel;
      workspace_bytes = std::max(workspace_bytes, workspace_size(args));
    }
  }
  const testing::DeviceBuffer workspace(workspace_bytes);
  BenchRow gather_row;
  time_reference_gather(ctx, layers, gather_row);

  for (Dsv4Kernel kernel : ctx.options.kernels) {
    auto layer_args = [&](int i) {
      Dsv4DecodeArgs args = layers.layer(i).args;
      args.kernel = kernel;
      return args;
    };
    const LayerCheck check = check_layer(layer_args(0), ctx.options.check_tokens, ctx.stream);
    // A diagnostic build's stage skips (instrument.h) make the output wrong
    // by design: time it anyway.
    if (!check.passes() && instrument::skip_stages() == 0) {
      std::printf("FAIL T=%lld width=%d heads=%d mode %s kernel %s, not timed: %s\n",
                  static_cast<long long>(shape.tokens), shape.width, shape.heads, mode_name(shape.mode),
                  kernel_name(kernel), check.summary().c_str());
      return ShapeOutcome::kCheckFailed;
    }
    BenchRow row = gather_row;
    row.tokens = shape.tokens;
    row.width = shape.width;
    row.heads = shape.heads;
    row.mode = shape.mode;
    row.dtype = shape.dtype;
    row.layers = layers.count();
    row.kernel = kernel;
    row.ran = dsv4_chosen_kernel(layer_args(0));
    row.gathered_bytes = layers.gathered_bytes_per_layer();
    row.check_error = check.first_tokens.relative_l2;
    row.decode_us = time_per_layer(ctx, layers.count(), [&](int i, cudaStream_t stream) {
      if (Status status = dsv4_decode(layer_args(i), workspace.get(), workspace_bytes, stream); !status.ok()) {
        throw std::runtime_error("dsv4_decode: " + status.message());
      }
    });
    rows.push_back(row);
  }
  return ShapeOutcome::kTimed;
}

}  // namespace

const char* kernel_name(Dsv4Kernel kernel) {
  if (kernel == kPackedStreamH64) return "stream_h64";  // not a Dsv4Kernel value
  if (kernel == kPackedSplitH64) return "split_h64";
  switch (kernel) {
    case Dsv4Kernel::kCluster: return "cluster";
    case Dsv4Kernel::kStream: return "stream";
    case Dsv4Kernel::kSplit: return "split";
    default: return "auto";
  }
}

std::vector<int32_t> default_heads(BenchLayout layout) {
  if (layout == BenchLayout::kPlain || layout == BenchLayout::kPacked) return {16, 64, 128};
  return {16};
}

std::vector<BenchMode> layout_modes(BenchLayout layout) {
  if (layout == BenchLayout::kDsa) return {BenchMode::kDistinct};
  return {BenchMode::kShared, BenchMode::kDistinct};
}

BenchOptions with_layout_defaults(BenchOptions options) {
  if (options.heads.empty()) options.heads = default_heads(options.layout);
  if (options.modes.empty()) options.modes = layout_modes(options.layout);
  return options;
}

int run_dsv4_bench(const BenchOptions& options) {
  std::ofstream csv;
  if (const int status = start_run(options, check_dsv4_options(options), csv); status != 0) return status;
  const int64_t element = options.dtype == DType::kBFloat16 ? 2 : 1;
  if (const int status = check_distinct_memory(options, kHeadDim * element, element); status != 0) return status;
  const Stream stream = make_stream();

  int failed = 0;
  for (BenchMode mode : options.modes) {
    // Each mode its own pools: the shared mode's are the defaults, the
    // distinct mode's hold every row of the largest shape once.
    const PoolBytes bytes = pool_bytes_for(mode, options.tokens, options.widths, options.layers, kHeadDim * element,
                                           default_pool_bytes(options));
    const KvPools pools(bytes.swa, bytes.compressed, options.layers, options.dtype, options.seed, stream.get());
    GraphTimer timer(stream.get(), options.flush_bytes);
    BenchContext ctx{options, stream.get(), pools, timer};
    print_header(options, pools, timer, mode);
    for_each_shape(options, mode, [&](const BenchShape& shape) {
      std::vector<BenchRow> rows;
      const ShapeOutcome outcome = run_shape(ctx, shape, rows);
      failed += outcome == ShapeOutcome::kCheckFailed;
      for (const BenchRow& row : rows) {
        print_row(row);
        if (csv.is_open()) write_csv_row(csv, row);
      }
    });
  }
  std::printf(
      "\nGB/s = gathered bytes / decode time; fraction = gather_us / decode_us (1.0: as fast as the pure gather)\n");
  return finish_run(options, csv.is_open(), failed);
}

}  // namespace sparse_decode::bench
