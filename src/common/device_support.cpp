#include "common/device_support.h"

#include <cuda_runtime_api.h>

namespace sparse_decode {

Status hopper_device_status(const std::string& prefix) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return Status::NotSupported(prefix + "device memory: no CUDA device is available");
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return Status::NotSupported(prefix + "device: the kernels are built for sm_90a (Hopper), the device is sm_" +
                                std::to_string(major * 10 + minor));
  }
  return Status::Ok();
}

}  // namespace sparse_decode
