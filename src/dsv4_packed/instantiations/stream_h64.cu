// Explicit instantiation of the packed stream kernel's 64-head form in its
// plain and general forms (one CTA a (token, 64-head group) unit, or a run
// of its chunks on the split path).
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/kernels/stream_h64_kernel.cuh"

namespace sparse_decode::dsv4_packed {
const void* stream_h64_kernel_pointer(bool general) {
  return general ? reinterpret_cast<const void*>(&stream_h64_kernel<true>)
                 : reinterpret_cast<const void*>(&stream_h64_kernel<false>);
}
}  // namespace sparse_decode::dsv4_packed

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_packed_stream_h64(unsigned long long* host) {
  return copy_clocks(host);
}
int sparse_decode::instrument::phase_clocks::read_packed_stream_h64_stamps(unsigned long long* host) {
  return copy_stamps(host);
}
#endif
