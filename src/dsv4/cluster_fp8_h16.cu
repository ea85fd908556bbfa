// Explicit instantiation: the cluster kernel, FP8 E4M3, 16 heads.
#include "dsv4/cluster_kernel.cuh"
#include "dsv4/launch.h"

namespace sparse_decode::dsv4 {
const void* cluster_kernel_fp8_h16() { return reinterpret_cast<const void*>(&cluster_kernel<ClusterTraitsFp8>); }
}  // namespace sparse_decode::dsv4
