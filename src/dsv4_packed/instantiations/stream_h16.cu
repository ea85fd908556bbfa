// Explicit instantiations of the packed-row stream kernel (16 heads a CTA;
// other head counts are CTAs of 16, 8 heads padded): one CTA a unit, and a
// pair of CTAs a unit for batches of at most one unit per two CTA slots;
// the split path (0: runs of chunks a CTA, shares in the workspace) and its combine kernel.
#include "common/dispatch.h"
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4_packed {
const void* stream_kernel_pointer(int unit_ctas) {
  return with_value<2, 1, 0>(unit_ctas, [](auto ctas) {
    return reinterpret_cast<const void*>(&stream::stream_kernel<decltype(ctas)::value>);
  });
}
const void* combine_kernel_pointer(int shares) {
  return with_bound<2, 4, 10, 16>(shares, [](auto bound) {
    return reinterpret_cast<const void*>(&stream::combine_kernel<decltype(bound)::value>);
  });
}
}  // namespace sparse_decode::dsv4_packed

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_packed_stream(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::instrument::phase_clocks::read_packed_stream_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
