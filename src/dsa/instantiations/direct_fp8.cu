// The direct split kernel, FP8 E4M3 caches: with the workspace and the
// combine kernel, and with the row's splits folded in a cluster.
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/direct_kernel.cuh"

namespace sparse_decode::dsa {
const void* direct_kernel_fp8() { return reinterpret_cast<const void*>(&direct_kernel<false>); }
const void* direct_cluster_kernel_fp8() { return reinterpret_cast<const void*>(&direct_kernel<true>); }
}  // namespace sparse_decode::dsa
