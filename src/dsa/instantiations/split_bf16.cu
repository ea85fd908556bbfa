// Explicit instantiation: the split kernel, BF16 caches, with the workspace
// and the combine kernel, and with the row's splits folded in a cluster.
#include "dsa/instantiations/kernels.h"
#include "dsa/kernels/split_kernel.cuh"

namespace sparse_decode::dsa {
const void* split_kernel_bf16(bool regions_share_tiles) {
  return regions_share_tiles ? reinterpret_cast<const void*>(&split_kernel<false, true, false>)
                             : reinterpret_cast<const void*>(&split_kernel<false, false, false>);
}
const void* split_cluster_kernel_bf16(bool regions_share_tiles) {
  return regions_share_tiles ? reinterpret_cast<const void*>(&split_kernel<false, true, true>)
                             : reinterpret_cast<const void*>(&split_kernel<false, false, true>);
}
}  // namespace sparse_decode::dsa
