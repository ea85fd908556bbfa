#include "bench/packed_bench.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_run.h"
#include "bench/cuda_check.h"
#include "bench/packed_check.h"
#include "bench/packed_layers.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::bench {

std::string check_packed_options(const BenchOptions& o) {
  if (o.dtype != DType::kFloat8E4M3) {
    return "--dtype: expected fp8 with --layout packed (packed rows are FP8 + BF16), got bf16";
  }
  static_assert(static_cast<int>(kPackedStreamH64) == static_cast<int>(Dsv4PackedKernel::kStreamH64));
  static_assert(static_cast<int>(kPackedSplitH64) == static_cast<int>(Dsv4PackedKernel::kSplitH64));
  if (o.kernels.size() != 1) {
    return "--kernel: expected auto, cluster, stream, split, stream_h64 or split_h64 with --layout packed, got all";
  }
  for (int32_t w : o.widths) {
    if (w < kSwaColumns || w % 4 != 0 || w > kSwaColumns + kPackedMaxWidth) {
      return "--widths: expected 128 SWA + 0..16384 extra columns, a multiple of 4, with --layout packed, got " +
             std::to_string(w);
    }
  }
  return check_common_options(o);
}

namespace {

// Everything that outlives one shape.
struct PackedContext {
  const BenchOptions& options;
  CUstream_st* stream;
  const PackedPools& pools;
  GraphTimer& timer;
};

void print_header(const BenchOptions& o, const PackedPools& pools, const GraphTimer& timer, BenchMode mode) {
  print_mode_note(mode, false);
  std::printf("packed 584-byte rows (SPEC section 2), pages of %lld rows; scale bytes %d..%d; BF16 q and out\n",
              static_cast<long long>(kBenchPageSize), kPackedBenchScaleMin, kPackedBenchScaleMax);
  std::printf("%d layers a graph, each its own indices and pool region; pools %.2f GiB; L2 flushed with %zu MiB\n",
              o.layers, pools.total_bytes() / double(1 << 30), timer.flush_bytes() / kMiB);
  std::printf("sinks on, every column active (lens = widths); median of %d replays (per layer = replay / L)%s%s\n",
              o.replays, o.enable_pdl ? ", PDL on" : "", o.batch_invariant ? ", batch_invariant on" : "");
  print_gather_note(o);
  std::printf("%6s %6s %6s %5s %-8s %11s %12s %9s %11s %7s %10s %10s\n", "T", "width", "extra", "heads", "mode",
              "decode_us", "gathered_MB", "GB/s", "gather_us", "rows/w", "fraction", "check_err");
}

void print_row(const BenchRow& r) {
  std::printf("%6lld %6d %6d %5d %-8s %11.2f %12.3f %9.1f %11.2f %7d %10.3f %10.2e\n",
              static_cast<long long>(r.tokens), r.width, r.width - kSwaColumns, r.heads, mode_name(r.mode), r.decode_us,
              r.gathered_bytes / 1e6, r.gbps(), r.gather_us, r.gather_rows_per_warp, r.gather_fraction(), r.check_error);
  std::fflush(stdout);
}

void write_csv_row(std::ofstream& csv, const BenchRow& r, bool pdl, bool invariant) {
  csv << "dsv4_decode_packed,packed" << (invariant ? "+invariant" : "") << (pdl ? "+pdl," : ",") << r.tokens << ',' << r.width << ',' << r.heads
      << ',' << r.layers << ',' << r.decode_us << ',' << r.gathered_bytes << ',' << r.gbps() << ',' << r.gather_us
      << ',' << r.gather_fraction() << ',' << mode_name(r.mode) << '\n';
  csv.flush();
}

enum class ShapeOutcome { kTimed, kSkipped, kCheckFailed };

// Checks layer 0, then times the reference gather and the decode of one shape.
ShapeOutcome run_shape(PackedContext& ctx, const BenchShape& shape, BenchRow& row) {
  const BenchOptions& o = ctx.options;
  PackedBenchLayers layers(ctx.pools, shape, o.seed + 7919ull * shape.tokens + shape.width, ctx.stream);
  layers.set_kernel(o.kernels[0]);
  layers.set_batch_invariant(o.batch_invariant);
  if (Status status = supports(layers.layer(0).args); !status.ok()) {
    std::printf("skip T=%lld width=%d heads=%d: %s\n", static_cast<long long>(shape.tokens), shape.width, shape.heads,
                status.message().c_str());
    return ShapeOutcome::kSkipped;
  }
  const LayerCheck check = check_packed_layer(layers.layer(0).args, ctx.pools.host_swa_region0(),
                                              ctx.pools.host_extra_region0(), o.check_tokens, ctx.stream);
  if (!check.passes()) {
    std::printf("FAIL T=%lld width=%d heads=%d mode %s, not timed: %s\n", static_cast<long long>(shape.tokens),
                shape.width, shape.heads, mode_name(shape.mode), check.summary().c_str());
    return ShapeOutcome::kCheckFailed;
  }
  size_t workspace_bytes = 0;
  for (int i = 0; i < layers.count(); ++i) workspace_bytes = std::max(workspace_bytes, workspace_size(layers.layer(i).args));
  const testing::DeviceBuffer workspace(workspace_bytes);

  const GatherTime gather = time_reference_gather(ctx.timer, o, layers.count(),
                                                  [&](int i) -> const GatherLayer& { return layers.layer(i).gather; });
  row.tokens = shape.tokens;
  row.width = shape.width;
  row.heads = shape.heads;
  row.mode = shape.mode;
  row.layers = layers.count();
  row.gathered_bytes = layers.gathered_bytes_per_layer();
  row.gather_us = gather.us;
  row.gather_rows_per_warp = gather.rows_per_warp;
  row.check_error = check.first_tokens.relative_l2;
  row.decode_us = time_per_layer(ctx.timer, o, layers.count(), [&](int i, CUstream_st* stream) {
    if (Status status = dsv4_decode_packed(layers.layer(i).args, workspace.get(), workspace_bytes, stream); !status.ok()) {
      throw std::runtime_error("dsv4_decode_packed: " + status.message());
    }
  });
  return ShapeOutcome::kTimed;
}

}  // namespace

int run_packed_bench(const BenchOptions& options) {
  std::ofstream csv;
  if (const int status = start_run(options, check_packed_options(options), csv); status != 0) return status;
  if (const int status = check_distinct_memory(options, kPackedRowBytes, 2); status != 0) return status;
  const Stream stream = make_stream();

  int failed = 0;
  for (BenchMode mode : options.modes) {
    // Each mode its own pools (the shared mode's are the defaults).
    const PoolBytes bytes = pool_bytes_for(mode, options.tokens, options.widths, options.layers, kPackedRowBytes,
                                           default_pool_bytes(options));
    const PackedPools pools(bytes.swa, bytes.compressed, options.layers, options.seed, stream.get());
    GraphTimer timer(stream.get(), options.flush_bytes);
    PackedContext ctx{options, stream.get(), pools, timer};
    print_header(options, pools, timer, mode);
    for_each_shape(options, mode, [&](const BenchShape& shape) {
      BenchRow row;
      const ShapeOutcome outcome = run_shape(ctx, shape, row);
      failed += outcome == ShapeOutcome::kCheckFailed;
      if (outcome != ShapeOutcome::kTimed) return;
      print_row(row);
      if (csv.is_open()) write_csv_row(csv, row, options.enable_pdl, options.batch_invariant);
    });
  }
  std::printf("\nGB/s = gathered bytes (T x W x 584 + BF16 q and out) / decode time; "
              "fraction = gather_us / decode_us (1.0: as fast as the pure gather)\n");
  return finish_run(options, csv.is_open(), failed);
}

}  // namespace sparse_decode::bench
