// Explicit instantiations of the 64-head split path's combine kernel, in its
// plain and general forms, for up to 2, 4, 10 or 16 shares a unit.
#include "common/dispatch.h"
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/kernels/combine_h64_kernel.cuh"

namespace sparse_decode::dsv4_packed {
const void* combine_h64_kernel_pointer(int shares, bool general) {
  return with_bound<2, 4, 10, 16>(shares, [&](auto bound) {
    constexpr int kMax = decltype(bound)::value;
    return general ? reinterpret_cast<const void*>(&combine_h64_kernel<kMax, true>)
                   : reinterpret_cast<const void*>(&combine_h64_kernel<kMax, false>);
  });
}
}  // namespace sparse_decode::dsv4_packed
