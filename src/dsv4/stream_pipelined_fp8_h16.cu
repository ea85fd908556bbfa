// Explicit instantiation: the deep stream kernel with P V warps (4 KV
// tiles, 1 CTA an SM; P V of a chunk beside the next chunk's scores), FP8 E4M3, 16 heads.
#include "dsv4/launch.h"
#include "dsv4/stream_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* stream_pipelined_kernel_fp8_h16() {
  return reinterpret_cast<const void*>(&stream_kernel<StreamPipelinedTraitsFp8>);
}
}  // namespace sparse_decode::dsv4

#if defined(SPARSE_DECODE_PHASE_CLOCKS)
int sparse_decode::dsv4::phase_clocks::read_stream_pipelined(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::dsv4::phase_clocks::read_stream_pipelined_stamps(unsigned long long* host) {
  return copy_stamps(host);
}
#endif
