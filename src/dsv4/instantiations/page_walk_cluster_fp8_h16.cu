// Explicit instantiation, page-walk form (traits.cuh: kPageWalkForm):
// the cluster kernel, FP8 E4M3, 16 heads (ClusterFp8).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/cluster_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* page_walk_cluster_kernel_fp8_h16() {
  return reinterpret_cast<const void*>(&cluster_kernel<PageWalkTraits<ClusterTraitsFp8>>);
}
}  // namespace sparse_decode::dsv4
