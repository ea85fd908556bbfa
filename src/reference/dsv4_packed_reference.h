// The double-precision CPU implementation of SPEC section 2 (packed 584-byte
// rows): the oracle of the packed tests and the CPU backend of
// dsv4_decode_packed for host memory. The softmax and the output writing are
// section 1's (reference::attend, reference::write_host_outputs); only the
// row decoding and the two-segment column rule are new.
#pragma once

#include <cstdint>

#include "reference/dsv4_reference.h"
#include "sparse_decode/dsv4_decode_packed.h"

namespace sparse_decode::reference {

// The 576 data bytes and the 8 scale bytes of row `row` of `pool`.
const uint8_t* packed_row_data(const PackedPool& pool, int64_t row);
const uint8_t* packed_row_scales(const PackedPool& pool, int64_t row);

// Decodes row `row` of `pool` exactly: dims 0..447 are E4M3 times the UE8M0
// scale of their 64-dim tile, dims 448..511 BF16. Writes out [512].
void decode_packed_row(const PackedPool& pool, int64_t row, double* out);

enum class PackedSegmentId { kSwa, kExtra };

// SWA columns c < 128 that the seq_lens window leaves active for token
// `token`: min(128, max(0, p + 1)), p its position (section 1's rule; 0 for a
// token that no varlen request holds), 128 without seq_lens.
int64_t dsv4_packed_window(const Dsv4PackedDecodeArgs& args, int64_t token);

// Whether column `column` of segment `segment` of token `token` takes part in
// the softmax (c < lens[t], index >= 0 and < rows, and for SWA columns c <
// 128 c < the window), and the row it names. The extra segment has no
// columns when it is absent.
struct PackedColumnState {
  bool active = false;
  bool out_of_range = false;  // would be active but its index is past its pool
  int64_t row = -1;
};
PackedColumnState dsv4_packed_column(const Dsv4PackedDecodeArgs& args, PackedSegmentId segment, int64_t token,
                                     int32_t column);

// Computes SPEC section 2 from host pointers (args.memory is not looked at;
// args.out, args.lse and args.out_of_range_count are not written). The
// columns of the SWA segment come first, then those of the extra segment.
Dsv4Result dsv4_decode_packed(const Dsv4PackedDecodeArgs& args);

// Runs dsv4_decode_packed() and writes args.out (BF16, nearest even),
// args.lse and adds to *args.out_of_range_count: the CPU backend.
void dsv4_decode_packed_host(const Dsv4PackedDecodeArgs& args);

}  // namespace sparse_decode::reference
