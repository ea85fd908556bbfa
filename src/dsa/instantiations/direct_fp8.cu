// The direct split kernel, FP8 E4M3 caches: with the workspace and the
// combine kernel, and with the row's splits folded in a cluster.
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/direct_kernel.cuh"

namespace sparse_decode::dsa {
const void* direct_kernel_fp8(bool regions_share_tiles) {
  return regions_share_tiles ? reinterpret_cast<const void*>(&direct_kernel<false, true>)
                             : reinterpret_cast<const void*>(&direct_kernel<false, false>);
}
const void* direct_cluster_kernel_fp8(bool regions_share_tiles) {
  return regions_share_tiles ? reinterpret_cast<const void*>(&direct_kernel<true, true>)
                             : reinterpret_cast<const void*>(&direct_kernel<true, false>);
}
}  // namespace sparse_decode::dsa
