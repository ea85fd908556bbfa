// `sparse-decode bench --layout packed`: per-layer time of dsv4_decode_packed
// (packed 584-byte rows, SPEC section 2) measured as DESIGN.md "How
// performance is measured" says, beside a plain gather of the same rows.
#pragma once

#include "bench/dsv4_bench.h"

namespace sparse_decode::bench {

// Runs every shape of `options` (tokens x widths x heads; width W = the 128
// SWA columns + an extra segment of W - 128, none at W = 128), prints the
// table and writes the CSV. --dtype and --kernel belong to the plain layout.
// Returns the exit code as run_dsv4_bench does.
int run_packed_bench(const BenchOptions& options);

// What --layout packed asks of the options: empty when they are fine, else one line
// naming the option, what it accepts and what it got.
std::string check_packed_options(const BenchOptions& options);

}  // namespace sparse_decode::bench
