// Explicit instantiation of the packed cluster kernel (16 heads a CTA; other
// head counts are grid rows of 16, 8 heads padded).
#include "dsv4_packed/instantiations/kernels.h"
#include "dsv4_packed/kernels/cluster_kernel.cuh"

namespace sparse_decode::dsv4_packed {
const void* cluster_kernel_pointer() { return reinterpret_cast<const void*>(&cluster_kernel); }
}  // namespace sparse_decode::dsv4_packed
