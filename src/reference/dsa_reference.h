// The double-precision CPU implementation of SPEC section 4 (dsa_decode):
// the oracle of the tests and the CPU backend for host memory.
#pragma once

#include <cstdint>
#include <vector>

#include "sparse_decode/dsa_decode.h"

namespace sparse_decode::reference {

struct DsaResult {
  std::vector<double> out;      // [rows, heads, 192], gate applied; zeros for inactive rows
  std::vector<uint8_t> active;  // [rows]: 1 where the row did work
  std::vector<int64_t> keys;    // [rows]: visible keys the row attended (0 for inactive rows)
};

// One key a row attends: where its K and V are, and its position.
struct DsaKey {
  int32_t column = 0;    // region column of the row
  int64_t page = 0;      // page of the cache
  int32_t slot = 0;      // slot of the page (position % block)
  int64_t position = 0;  // key position in the request
};

// The keys of an active row, in region-column order, then position order:
// columns with -1, an id outside [0, max_blocks) or a page outside
// [0, num_pages) give none; a region repeated in two columns gives its keys
// twice. Reads args.regions, block_table and positions only.
std::vector<DsaKey> dsa_visible_keys(const DsaDecodeArgs& args, int64_t row);

// The sigmoid gate of (row, head) rounded to args.gate_dtype, or 1 without a gate.
double dsa_gate(const DsaDecodeArgs& args, int64_t row, int head);

// Computes SPEC section 4 from host pointers, ignoring args.splits (the exact
// result is the same for every split; args.memory and args.out are not
// looked at).
DsaResult dsa_decode(const DsaDecodeArgs& args);

// The split + combine of the GPU design (docs/formats/dsa_layout.md), emulated:
// split s of a row takes the region columns c with c % splits == s, stores
// its normalized output and log-sum-exp as float32 (as the workspace will),
// and the combine merges the splits in double. Differs from dsa_decode()
// only by the float32 rounding of the partials.
DsaResult dsa_decode_split_combine(const DsaDecodeArgs& args);

// Runs dsa_decode() and writes args.out (BF16, nearest even) for active
// rows, and zeros for inactive rows when clear_inactive: the CPU backend.
void dsa_decode_host(const DsaDecodeArgs& args);

}  // namespace sparse_decode::reference
