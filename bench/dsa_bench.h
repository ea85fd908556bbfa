// `sparse-decode bench --layout dsa`: per-layer time of dsa_decode
// (region-paged DSA decode with GQA, SPEC section 4) measured as DESIGN.md
// "How performance is measured" says, beside a plain gather of the same
// cache slots.
#pragma once

#include "bench/dsv4_bench.h"

namespace sparse_decode::bench {

// Runs every shape of `options` (--heads x --groups x --block x --regions x
// --tokens, each with every --splits value), prints the table and writes the
// CSV. --widths, --kernel and --gather-rows belong to the other layouts.
// Returns the exit code as run_dsv4_bench does.
int run_dsa_bench(const BenchOptions& options);

// What --layout dsa asks of the options: empty when they are fine, else one line
// naming the option, what it accepts and what it got.
std::string check_dsa_options(const BenchOptions& options);

}  // namespace sparse_decode::bench
