// The one launch path of every kernel: a launch configuration (grid, block,
// dynamic shared memory, stream, PDL as a launch attribute, and a cluster
// shape where a kernel runs in clusters) and launch_kernel. Header-only so
// that a program with its own CUDA runtime (the diagnostics) launches its
// kernels the same way: the library's static runtime does not know kernels
// registered with another runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sparse_decode {

struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attributes[2] = {};

  // `cluster_ctas`: 0 launches without a cluster attribute; n >= 1 in
  // clusters of n CTAs along x.
  LaunchConfig(dim3 grid, dim3 block, size_t smem, bool pdl, cudaStream_t stream, unsigned cluster_ctas = 0) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim = {cluster_ctas, 1, 1};
    config.attrs = attributes;
    config.numAttrs = cluster_ctas > 0 ? 2 : 1;
  }
  // A one-dimensional grid of `ctas` CTAs of `threads` threads.
  LaunchConfig(int64_t ctas, int threads, size_t smem, bool pdl, cudaStream_t stream, unsigned cluster_ctas = 0)
      : LaunchConfig(dim3(static_cast<unsigned>(ctas)), dim3(threads), smem, pdl, stream, cluster_ctas) {}
  // config.attrs points into this object.
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

}  // namespace sparse_decode
