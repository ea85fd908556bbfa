// The double-precision CPU implementation of SPEC section 3 (HCA: the
// compressed stream read by pages): the oracle of the HCA tests and the CPU
// backend of dsv4_decode_hca for host memory. Only the column rule is new:
// the decoded rows go through section 1's softmax (reference::attend) and
// output writing (reference::write_host_outputs).
#pragma once

#include <cstdint>

#include "reference/dsv4_reference.h"
#include "sparse_decode/dsv4_decode_hca.h"

namespace sparse_decode::reference {

// Whether a window column or a compressed slot takes part in the softmax,
// and the row of its pool that it names.
struct HcaRowState {
  bool active = false;
  bool out_of_range = false;  // would be active but its row (or page) is past its pool
  int64_t row = -1;
};

// Window column `column` (0..127) of token `token`: active iff
// column < clamp(swa_lens[t], 0, 128) and 0 <= swa_rows[t, column] < rows.
HcaRowState hca_swa_column(const Dsv4HcaDecodeArgs& args, int64_t token, int32_t column);

// The compressed slots token `token` attends:
// min(lens[t] - 128, hca_seq_lens[b] - 128, max_pages * page_size), at least
// 0; 0 for a token that no request holds.
int64_t hca_compressed_slots(const Dsv4HcaDecodeArgs& args, int64_t token);

// Slot `slot` (< hca_compressed_slots) of token `token`: page
// block_table[t, slot / page_size]; masked when negative, masked and counted
// when >= compressed_kv.pages.
HcaRowState hca_compressed_slot(const Dsv4HcaDecodeArgs& args, int64_t token, int64_t slot);

// Computes SPEC section 3 from host pointers (args.memory is not looked at;
// args.out, args.lse and args.out_of_range_count are not written). The window
// columns come first, then the compressed slots, each in order.
Dsv4Result dsv4_decode_hca(const Dsv4HcaDecodeArgs& args);

// Runs dsv4_decode_hca() and writes args.out (BF16, nearest even), args.lse
// and adds to *args.out_of_range_count: the CPU backend.
void dsv4_decode_hca_host(const Dsv4HcaDecodeArgs& args);

}  // namespace sparse_decode::reference
