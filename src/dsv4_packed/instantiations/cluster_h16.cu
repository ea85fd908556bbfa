// Explicit instantiation of the packed cluster kernel in its plain and
// general forms (16 heads a CTA; other head counts are grid rows of 16, 8
// heads padded).
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/kernels/cluster_kernel.cuh"

namespace sparse_decode::dsv4_packed {
const void* cluster_kernel_pointer(bool general) {
  return general ? reinterpret_cast<const void*>(&cluster_kernel<true>)
                 : reinterpret_cast<const void*>(&cluster_kernel<false>);
}
}  // namespace sparse_decode::dsv4_packed
