// convert_page_aligned_indices on the device (convert_kernel.cu): the host
// side of its launch. The rules are convert_rules.h's.
#pragma once

#include "dsv4_hca/convert_rules.h"
#include "sparse_decode/status.h"

struct CUstream_st;

namespace sparse_decode::dsv4_hca {

// Queues the device conversion of validated device arguments on `stream`:
// the report is cleared (a memset node), a check kernel counts the tokens
// that break a rule, and a write kernel writes the outputs only when none
// does (else it completes the report). No allocation, no host
// synchronization, no atomics whose order shows in a result.
Status launch_convert(const ConvertParams& params, CUstream_st* stream);

}  // namespace sparse_decode::dsv4_hca
