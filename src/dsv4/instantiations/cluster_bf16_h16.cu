// Explicit instantiation, plain and general forms (traits.cuh): the cluster
// kernel, BF16, 16 heads (ClusterBf16).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/cluster_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* cluster_kernel_bf16_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&cluster_kernel<GeneralTraits<ClusterTraitsBf16>>)
                 : reinterpret_cast<const void*>(&cluster_kernel<ClusterTraitsBf16>);
}
}  // namespace sparse_decode::dsv4
