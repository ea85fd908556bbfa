// How many chunks the stream kernels walk for a token, host and device
// alike: the kernels' walked_chunks (dsv4/steps/token_scope.cuh) applies
// it, and a CPU test checks it over every width's chunk plan
// (tests/cpu/dsv4/test_walk_rules.cpp).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace sparse_decode::dsv4 {

// The chunks up to the end of the column group that holds the token's last
// active column (`len` active columns; at least one chunk, so that every
// walk starts): `chunks` chunks of 64 columns, `chunks_per_group` a column
// group. The groups past it are wholly masked. Whole groups: a group cut
// short would fold a P V sum that the full walk carries through further
// (masked) MMAs, whose sign of zero PTX leaves open. The min comes before
// the rounding: `len` reaches INT32_MAX.
SPARSE_DECODE_HD int32_t walked_chunk_count(int32_t len, int32_t chunks, int32_t chunks_per_group) {
  constexpr int32_t kColumns = 64;
  const int32_t active = len < 1 ? 1 : len;
  const int32_t columns = active < chunks * kColumns ? active : chunks * kColumns;
  const int32_t needed = (columns + kColumns - 1) / kColumns;
  const int32_t groups = (needed + chunks_per_group - 1) / chunks_per_group;
  return groups * chunks_per_group < chunks ? groups * chunks_per_group : chunks;
}

}  // namespace sparse_decode::dsv4
