// What the plain-row bench (dsv4_bench) and the packed-row bench
// (packed_bench) share: the stream, the device line, the CSV file, and the
// per-layer timing of L launches and of the reference gather, both through
// one GraphTimer (DESIGN.md "How performance is measured").
#pragma once

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_kernels.h"
#include "bench/bench_layers.h"
#include "bench/dsv4_bench.h"
#include "bench/graph_timer.h"

namespace sparse_decode::bench {

// The CSV columns of the plain, packed and HCA layouts (bench/results/README.md).
inline constexpr const char* kCsvHeader =
    "kernel,path,tokens,width,heads,layers,us_per_layer,gathered_bytes,gbps,gather_us,gather_fraction,mode\n";

struct StreamDeleter {
  void operator()(CUstream_st* stream) const;
};
using Stream = std::unique_ptr<CUstream_st, StreamDeleter>;

Stream make_stream();  // a non-blocking stream (a graph is captured on it)

// What every layout asks of the options: L, replays, --gather-rows, at least
// one T (each >= 1), width, head count (8, 16, 32, 64 or 128 outside
// --layout dsa) and mode, and the DSA options only with --layout dsa. Empty
// when they are fine; else one line naming the option, what it accepts and
// what it got.
std::string check_common_options(const BenchOptions& options);

// The --kernel value of the options: "auto", "cluster", "stream", "split" or "all".
std::string kernels_name(const BenchOptions& options);

// Calls `run(shape)` for every shape of the options in `mode`: head counts
// outermost, then widths, then T (the order of the table).
void for_each_shape(const BenchOptions& options, BenchMode mode, const std::function<void(const BenchShape&)>& run);

// The pools of the options' --mode shared (512 MiB SWA, 1536 MiB compressed by default).
PoolBytes default_pool_bytes(const BenchOptions& options);

// Before any timing: when the options ask for the distinct mode, whether its
// pools (rows of `row_bytes`) and the layers' q (`q_bytes_per_value` a
// value), out and indices fit the free device memory beside the L2 flush
// buffer and 1 GiB. Returns 0, or 2 after saying what fits.
int check_distinct_memory(const BenchOptions& options, int64_t row_bytes, int64_t q_bytes_per_value);

// The header line that says how a mode draws the rows.
void print_mode_note(BenchMode mode, bool one_request_a_token);

// The closing lines of a run (the CSV written, shapes that failed); returns
// the exit code: 1 when a shape failed its check, else 0.
int finish_run(const BenchOptions& options, bool csv_written, int failed);

// The opening of a run: reports `problem` (what the options' check found;
// empty: none), makes sure a CUDA device serves the bench, opens the CSV
// (options.csv_path, if any) with its header and prints the device line.
// Returns 0, or the exit code (2) after saying why it cannot run.
int start_run(const BenchOptions& options, const std::string& problem, std::ofstream& csv);
// The header line that says which variants of the reference gather are timed.
void print_gather_note(const BenchOptions& options);

// Per-layer median time (µs) of the `layers` launches of `launch_layer(i, stream)`
// in one graph: median replay / layers, replays and warmup of the options.
double time_per_layer(GraphTimer& timer, const BenchOptions& options, int layers,
                      const std::function<void(int, CUstream_st*)>& launch_layer);
// The same for calls compared with each other (GraphTimer::time_interleaved):
// the per-layer median of launch_layers[k] at [k].
std::vector<double> time_per_layer_interleaved(
    GraphTimer& timer, const BenchOptions& options, int layers,
    const std::vector<std::function<void(int, CUstream_st*)>>& launch_layers);

// The fastest per-layer time of the reference gather over the variants that
// the options allow (--gather-rows), over the layers `gather(i)`.
struct GatherTime {
  double us = 0.0;
  int rows_per_warp = 0;
};
GatherTime time_reference_gather(GraphTimer& timer, const BenchOptions& options, int layers,
                                 const std::function<const GatherLayer&(int)>& gather);

}  // namespace sparse_decode::bench
