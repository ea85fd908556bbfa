// `sparse-decode bench --layout hca`: dsv4_decode_hca (SPEC section 3) on
// the plain bench's FP8 pools and layers with page-aligned top-k columns,
// beside dsv4_decode on the same rows (the section-1 table of HCA's
// expansion) and the plain gather of those rows.
#pragma once

#include "bench/dsv4_bench.h"

namespace sparse_decode::bench {

// Runs every shape and prints the table (and writes the CSV: a
// dsv4_decode_hca row and a dsv4_decode row a shape). Exit codes as
// run_dsv4_bench's; a check also fails when the two outputs differ in a bit.
int run_hca_bench(const BenchOptions& options);

// What --layout hca asks of the options: empty when they are fine, else one line
// naming the option, what it accepts and what it got.
std::string check_hca_options(const BenchOptions& options);

}  // namespace sparse_decode::bench
