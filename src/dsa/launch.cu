// Launch of the dsa_decode kernels (docs/kernels/dsa.md): the split kernel
// (or the direct kernel) on a (row, split) grid, then with more than one
// split the combine kernel (CombineTraits::kSlices CTAs a row),
// programmatic dependent launch between them; or the direct kernel with a
// row's splits as one cluster that folds them (kDirectCluster).
#include <cuda_runtime.h>

#include <utility>

#include "common/device_support.h"
#include "common/launch.h"
#include "common/per_device.h"
#include "dsa/dispatch.h"
#include "dsa/instantiations/kernels.h"
#include "dsa/smem.cuh"
#include "dsa/traits.cuh"

namespace sparse_decode::dsa {
namespace {

int set_kernel_attributes() {
  for (const bool share : {false, true}) {
    const std::pair<const void*, size_t> kernels[] = {{split_kernel_bf16(share), sizeof(SplitSmem<false>)},
                                                      {split_cluster_kernel_bf16(share), sizeof(SplitSmem<false>)},
                                                      {split_kernel_fp8(share), sizeof(SplitSmem<true>)},
                                                      {direct_kernel_fp8(share), sizeof(DirectSmem)},
                                                      {direct_cluster_kernel_fp8(share), sizeof(DirectSmem)}};
    for (const auto& [kernel, smem] : kernels) {
      const cudaError_t error =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (error != cudaSuccess) return error;
    }
    // Clusters of up to kDsaMaxClusterSplits (16) CTAs: past the portable 8.
    for (const void* kernel : {direct_cluster_kernel_fp8(share), split_cluster_kernel_bf16(share)}) {
      const cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (error != cudaSuccess) return error;
    }
  }
  return cudaSuccess;
}

Status configure_kernels() {
  static OncePerDevice configured(set_kernel_attributes, "configuring the dsa_decode kernels");
  return configured.run();
}

}  // namespace

int32_t largest_cluster_fold(DType cache_dtype) {
  // Cached per device and kernel (the occupancy queries are not free),
  // stored + 1 so that a device where no cluster fits is not asked again
  // (0: not known). A device whose kernels cannot be configured stays
  // unknown (asked again).
  static PerDeviceCache<int32_t> direct_cache, split_cache;
  const bool fp8 = cache_dtype == DType::kFloat8E4M3;
  const int device = current_device();
  if (device < 0) {
    cudaGetLastError();
    return 0;
  }
  const int32_t stored = (fp8 ? direct_cache : split_cache).get(device, 0, [fp8]() -> int32_t {
    if (!configure_kernels().ok()) {
      cudaGetLastError();
      return 0;
    }
    // Both instances take the same registers and shared memory: the one-region instance answers.
    const void* kernel = fp8 ? direct_cluster_kernel_fp8(false) : split_cluster_kernel_bf16(false);
    const unsigned threads = fp8 ? TileTraits::kThreads : SplitKernelTraits::kThreads;
    const size_t smem = fp8 ? sizeof(DirectSmem) : sizeof(SplitSmem<false>);
    for (int32_t ctas = kDsaMaxClusterSplits; ctas >= kMinCombinedSplits; --ctas) {
      const LaunchConfig launch(static_cast<unsigned>(ctas), threads, smem, false, nullptr,
                                static_cast<unsigned>(ctas));
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config) != cudaSuccess) {
        cudaGetLastError();
        return 0;
      }
      if (clusters > 0) return ctas + 1;
    }
    return 1;
  });
  return stored > 0 ? stored - 1 : 0;
}

Status launch(const DsaDecodeArgs& args, void* workspace, CUstream_st* stream) {
  if (Status status = configure_kernels(); !status.ok()) return status;
  DsaParams p = make_params(args, workspace);
  const bool fp8 = args.cache_dtype == DType::kFloat8E4M3;
  const bool direct = uses_direct_kernel(args);
  const bool cluster = uses_cluster_fold(args);
  const bool share = p.region_shift != kRegionAlone;
  const void* split = cluster && direct ? direct_cluster_kernel_fp8(share)
                      : cluster          ? split_cluster_kernel_bf16(share)
                      : direct           ? direct_kernel_fp8(share)
                      : fp8              ? split_kernel_fp8(share)
                                         : split_kernel_bf16(share);
  const size_t smem = direct ? sizeof(DirectSmem) : fp8 ? sizeof(SplitSmem<true>) : sizeof(SplitSmem<false>);
  const unsigned threads = direct ? TileTraits::kThreads : SplitKernelTraits::kThreads;
  if (Status status =
          launch_kernel(split,
                        LaunchConfig(args.num_rows * p.splits, threads, smem, args.enable_pdl, stream,
                                     cluster ? static_cast<unsigned>(p.splits) : 0u),
                        &p, "launching the dsa_decode split kernel");
      !status.ok()) {
    return status;
  }
  if (p.splits == 1 || cluster) return Status::Ok();
  // The combine kernel always overlaps the split kernel's tail (PDL).
  return launch_kernel(combine_kernel_for(p.splits),
                       LaunchConfig(args.num_rows * CombineTraits::kSlices, CombineTraits::kThreads, 0, true, stream),
                       &p, "launching the dsa_decode combine kernel");
}

}  // namespace sparse_decode::dsa
