// A kernel for the PDL tests: it writes a decode call's inputs late, so that
// a dependent launch that read them before its grid-dependency wait would
// read stale bytes.
#pragma once

#include <cstddef>

struct CUstream_st;

namespace sparse_decode::testing {

// Copies `bytes` (a multiple of 4) from src to dst on `stream` after spinning
// for about `delay_ns`. It releases dependent launches (PDL) at once, before
// the copy.
void launch_delayed_copy(void* dst, const void* src, size_t bytes, unsigned delay_ns, CUstream_st* stream);

}  // namespace sparse_decode::testing
