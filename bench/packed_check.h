// The packed bench's accuracy check (the packed twin of layer_check.h): runs
// one layer's dsv4_decode_packed once and compares its first tokens with the
// fp64 reference (reference::dsv4_decode_packed) on host copies of its q,
// indices, lens and sinks and of the pool regions the indices name.
#pragma once

#include <cstdint>

#include "bench/layer_check.h"
#include "sparse_decode/dsv4_decode_packed.h"

struct CUstream_st;

namespace sparse_decode::bench {

// `args`: device memory, contiguous out [T, H, 512], both segments' indices
// relative to pools whose host copies are `host_swa` and `host_extra` (the
// same geometry). Runs dsv4_decode_packed on `stream` once (throws if it fails).
LayerCheck check_packed_layer(const Dsv4PackedDecodeArgs& args, const PackedPool& host_swa,
                              const PackedPool& host_extra, int64_t max_tokens, CUstream_st* stream);

}  // namespace sparse_decode::bench
