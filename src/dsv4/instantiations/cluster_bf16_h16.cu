// Explicit instantiation: the cluster kernel, BF16, 16 heads (ClusterBf16).
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/cluster_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* cluster_kernel_bf16_h16() { return reinterpret_cast<const void*>(&cluster_kernel<ClusterTraitsBf16>); }
}  // namespace sparse_decode::dsv4
