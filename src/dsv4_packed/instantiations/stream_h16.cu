// Explicit instantiations of the packed stream kernel, each in its plain and
// general forms (16 heads a CTA; other head counts are CTAs of 16, 8 heads
// padded): one CTA a unit, a pair of CTAs a unit, and the split path (0: a
// run of chunks a CTA, shares in the workspace) with its combine kernel for
// up to 2, 4, 10 or 16 shares a unit.
#include "common/dispatch.h"
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/kernels/combine_kernel.cuh"
#include "dsv4_packed/kernels/stream_kernel.cuh"

namespace sparse_decode::dsv4_packed {
const void* stream_kernel_pointer(int unit_ctas, bool general) {
  return with_value<2, 1, 0>(unit_ctas, [&](auto ctas) {
    constexpr int kCtas = decltype(ctas)::value;
    return general ? reinterpret_cast<const void*>(&stream_kernel<kCtas, true>)
                   : reinterpret_cast<const void*>(&stream_kernel<kCtas, false>);
  });
}
const void* combine_kernel_pointer(int shares, bool general) {
  return with_bound<2, 4, 10, 16>(shares, [&](auto bound) {
    constexpr int kMax = decltype(bound)::value;
    return general ? reinterpret_cast<const void*>(&combine_kernel<kMax, true>)
                   : reinterpret_cast<const void*>(&combine_kernel<kMax, false>);
  });
}
}  // namespace sparse_decode::dsv4_packed

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_packed_stream(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::instrument::phase_clocks::read_packed_stream_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
