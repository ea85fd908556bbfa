// Explicit instantiation, plain and general forms (traits.cuh): the cluster
// kernel, FP8 E4M3, 16 heads (ClusterFp8).
#include "common/instrument.cuh"
#include "dsv4/configs.cuh"
#include "dsv4/instantiations/kernels.h"
#include "dsv4/kernels/cluster_kernel.cuh"

namespace sparse_decode::dsv4 {
const void* cluster_kernel_fp8_h16(bool general) {
  return general ? reinterpret_cast<const void*>(&cluster_kernel<GeneralTraits<ClusterTraitsFp8>>)
                 : reinterpret_cast<const void*>(&cluster_kernel<ClusterTraitsFp8>);
}
}  // namespace sparse_decode::dsv4

#if defined(SPARSE_DECODE_DIAGNOSTICS)
int sparse_decode::instrument::phase_clocks::read_cluster(unsigned long long* host) { return copy_clocks(host); }
int sparse_decode::instrument::phase_clocks::read_cluster_stamps(unsigned long long* host) { return copy_stamps(host); }
#endif
