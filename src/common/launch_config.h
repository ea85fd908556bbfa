// The launch configuration of launch_kernel (device_support.h): grid, block,
// dynamic shared memory, stream, and PDL as a launch attribute (the dsv4 and
// packed launchers build theirs with the same attribute, plus a cluster
// shape). Header-only so that a program with its own CUDA runtime (the
// diagnostics) launches its kernels the same way: the library's static
// runtime does not know kernels registered with another runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sparse_decode {

struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute pdl_attribute = {};

  LaunchConfig(int64_t ctas, int threads, size_t smem, bool pdl, cudaStream_t stream) {
    config.gridDim = dim3(static_cast<unsigned>(ctas));
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    pdl_attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl_attribute.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    config.attrs = &pdl_attribute;
    config.numAttrs = 1;
  }
  // config.attrs points into this object.
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

}  // namespace sparse_decode
